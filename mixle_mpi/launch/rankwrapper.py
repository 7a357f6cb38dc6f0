"""Where the MPICH rank wrapper (rankwrap.sh) lives: the launcher starts every rank through
it, and the driver starts a respawned worker through it (see rankwrap.sh for why)."""

from __future__ import annotations

from importlib import resources


def wrapper_path() -> str:
    return str(resources.files("mixle_mpi.launch").joinpath("rankwrap.sh"))


def wrapper_of(pid: int) -> tuple[int, str] | None:
    """The identity (pid, start time) of the rank wrapper that is ``pid``'s parent, or None
    (no wrapper: Open MPI, srun; another host; or already gone)."""
    from mixle_mpi.core import procs
    from mixle_mpi.launch.ranks import is_rank_wrapper

    ppid = procs.parent(pid)
    argv = procs.cmdline(ppid) if ppid else None
    if not argv or not is_rank_wrapper(argv):
        return None
    return procs.identity(ppid)
