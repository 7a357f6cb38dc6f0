"""Where the MPICH rank wrapper (rankwrap.sh) lives: the launcher starts every rank through
it, and the driver starts a respawned worker through it (see rankwrap.sh for why)."""

from __future__ import annotations

from importlib import resources


def wrapper_path() -> str:
    return str(resources.files("mixle_mpi.runtime").joinpath("rankwrap.sh"))


def wrapper_of(pid: int) -> tuple[int, str] | None:
    """The identity (pid, start time) of the rank wrapper that is ``pid``'s parent, or None
    (no wrapper: Open MPI, srun; another host; or already gone)."""
    from mixle_mpi.core.reaper import identity, stat_fields

    fields = stat_fields(pid)
    if not fields:
        return None
    ppid = int(fields[1])
    try:
        with open(f"/proc/{ppid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return None
    if len(argv) < 2 or not argv[1].endswith(b"rankwrap.sh"):
        return None
    return identity(ppid)
