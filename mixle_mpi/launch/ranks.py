"""Which processes of a launch are its ranks, whatever runs them: a rank carries its world
rank in its environment (set by mpiexec or srun), and a process that wraps another of the
same rank (a shell, mixle_mpi's MPICH rank wrapper, a ``run -- ./fit.sh``) is not the rank.
Pure over the rows of ``core.procs.table``; the reaper, the launcher's checks and the
external chaos campaign all recognise ranks here."""

from __future__ import annotations

import os
from collections.abc import Iterable

from mixle_mpi.core.procs import Row

RANK_VARS = (
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "PMIX_RANK",
)  # a rank's world rank, set by its launcher


def world_rank(env) -> int | None:
    """The world rank a launcher gave the process whose environment is ``env``, if any (pure)."""
    for var in RANK_VARS:
        value = env.get(var)
        if value is not None and str(value).strip().lstrip("-").isdigit():
            return int(value)
    return None


WRAPPER = "rankwrap.sh"  # mixle_mpi's MPICH rank wrapper (launch/rankwrap.sh)


def is_rank_wrapper(argv) -> bool:
    """``argv`` is a shell running mixle_mpi's rank wrapper (or its subshell, forked to run
    the rank and not yet replaced by it) (pure)."""
    return (
        len(argv) >= 2
        and os.path.basename(str(argv[0])) in ("sh", "dash", "bash")
        and os.path.basename(str(argv[1])) == WRAPPER
    )


def rank_processes(rows: dict[int, Row], candidates: Iterable[int]) -> list[int]:
    """Which of ``candidates`` (pids of ``rows``) are rank processes: they carry a world rank
    in their environment, are no rank wrapper, and no process below them carries the same
    rank (that one is the rank; these wrap it: a shell, a ``run -- ./fit.sh``). Whatever
    the interpreter is called (pure)."""
    ranked = {
        pid: world_rank(rows[pid].env)
        for pid in candidates
        if pid in rows and not is_rank_wrapper(rows[pid].argv)
    }
    ranked = {pid: r for pid, r in ranked.items() if r is not None}
    wrappers = set()
    for pid, r in ranked.items():
        up = rows[pid].ppid
        seen = 0
        while up in rows and seen < 64:  # walk up: an ancestor with the same rank wraps this one
            if ranked.get(up) == r:
                wrappers.add(up)
            up, seen = rows[up].ppid, seen + 1
    return sorted(set(ranked) - wrappers)
