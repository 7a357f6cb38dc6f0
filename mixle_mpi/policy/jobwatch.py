"""When a job that mpiexec keeps alive is stuck, as plain decisions over process states.

mpiexec waits for every rank. A rank that is SIGSTOPped (a hung node, a debugger left
attached) never ends, so a job whose other ranks all ended, or whose driver already
wrote its verdict, would keep the launcher waiting forever. The launcher reports the
state of the job's rank processes every second; :class:`JobWatch` says when to kill.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping

FINISH_GRACE = 30.0  # seconds the ranks get to end after the driver wrote its verdict
STUCK_GRACE = 10.0   # seconds every remaining rank may stay stopped before the job is killed
STOPPED = ("T", "t")
GONE = ("Z", "X", "x")


class JobWatch:
    def __init__(self, finish_grace: float = FINISH_GRACE, stuck_grace: float = STUCK_GRACE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.finish_grace, self.stuck_grace, self.clock = finish_grace, stuck_grace, clock
        self.seen_ranks = False
        self.done_at: float | None = None
        self.stuck_at: float | None = None

    def observe(self, driver_done: bool, ranks: Mapping[int, str]) -> str | None:
        """Feed the driver's verdict (written or not) and each rank process's state letter
        (as in /proc/PID/stat); returns why the job must be killed now, or None."""
        now = self.clock()
        alive = {pid: st for pid, st in ranks.items() if st not in GONE}
        if driver_done:
            self.done_at = self.done_at if self.done_at is not None else now
            if alive and now - self.done_at > self.finish_grace:
                return (f"the driver finished {now - self.done_at:.0f} s ago but rank processes "
                        f"{sorted(alive)} are still running")
        if alive:
            self.seen_ranks = True
        if self.seen_ranks and all(st in STOPPED for st in alive.values()):
            self.stuck_at = self.stuck_at if self.stuck_at is not None else now
            if now - self.stuck_at > self.stuck_grace:
                stopped = sorted(alive)
                return (f"every remaining rank process is stopped ({stopped}) and nothing else runs"
                        if stopped else "no rank process is left but mpiexec has not ended")
        else:
            self.stuck_at = None
        return None


class StartWatch:
    """A rank process lost before MPI is up on every rank. The others then wait inside
    MPI_Init until their alarm (``MIXLE_MPI_STARTUP_TIMEOUT``, 120 s by default) although the
    job can no longer start: the launcher ends it as soon as it sees the loss, and starts it
    again. Judged only once some rank of mixle_mpi's began MPI initialisation (the job is
    one of ours), and only for a rank missing from two looks in a row."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.missing: set[int] = set()

    def observe(self, mpi_up: bool, began: Collection[int], ranks: Mapping[int, str],
                rank_of: Mapping[int, int] | None = None) -> str | None:
        """``began``: the pids that began MPI initialisation; ``ranks``: each rank process's
        state letter; ``rank_of``: the MPI rank of the pids known. Why the job can no longer
        start, or None."""
        if mpi_up:
            return None
        alive = {pid for pid, st in ranks.items() if st not in GONE}
        self.seen |= alive
        missing = (self.seen | set(began)) - alive if began else set()
        lost = sorted(missing & self.missing)
        self.missing = missing
        if not lost:
            return None
        pid = lost[0]
        rank = (rank_of or {}).get(pid)
        who = f"rank {rank} (pid {pid})" if rank is not None else f"rank process {pid}"
        return (f"{who} ended before MPI was up on every rank ("
                + ("inside MPI initialisation" if pid in began else "before its MPI initialisation")
                + "): the other ranks could only wait inside MPI_Init for it")
