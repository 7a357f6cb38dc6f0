"""When a job that mpiexec keeps alive is stuck, as plain decisions over process states.

mpiexec waits for every rank. A rank that is SIGSTOPped (a hung node, a debugger left
attached) never ends, so a job whose other ranks all ended, or whose driver already
wrote its verdict, would keep the launcher waiting forever. The launcher reports the
state of the job's rank processes every second; :class:`StuckJobCheck` says when to kill.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping

from mixle_mpi.launch.reaper import APPEAR_WITHIN

FINISH_GRACE = 30.0  # seconds the ranks get to end after the driver wrote its verdict
STUCK_GRACE = 10.0  # seconds every remaining rank may stay stopped before the job is killed
STOPPED = ("T", "t")
GONE = ("Z", "X", "x")


class StuckJobCheck:
    def __init__(
        self,
        finish_grace: float = FINISH_GRACE,
        stuck_grace: float = STUCK_GRACE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
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
                return (
                    f"the driver finished {now - self.done_at:.0f} s ago but rank processes "
                    f"{sorted(alive)} are still running"
                )
        if alive:
            self.seen_ranks = True
        if self.seen_ranks and all(st in STOPPED for st in alive.values()):
            self.stuck_at = self.stuck_at if self.stuck_at is not None else now
            if now - self.stuck_at > self.stuck_grace:
                stopped = sorted(alive)
                return (
                    f"every remaining rank process is stopped ({stopped}) and nothing else runs"
                    if stopped
                    else "no rank process is left but mpiexec has not ended"
                )
        else:
            self.stuck_at = None
        return None


class LostStartCheck:
    """A rank process lost before MPI is up on every rank. The others then wait inside
    MPI_Init until their alarm (``MIXLE_MPI_STARTUP_TIMEOUT``, 120 s by default) although the
    job can no longer start: the launcher ends it as soon as it sees the loss, and starts it
    again. Judged only once some rank of mixle_mpi's began MPI initialisation (the job is
    one of ours), and only for a rank missing from two looks in a row. ``expect_here``: the
    number of ranks that start on this host (a one-host launch of our own fit), so that a
    rank killed before any look saw it is lost too once it has not appeared ``appear_within``
    seconds after another rank began MPI initialisation."""

    def __init__(
        self,
        expect_here: int | None = None,
        appear_within: float = APPEAR_WITHIN,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.expect_here, self.appear_within, self.clock = expect_here, appear_within, clock
        self.seen: set[int] = set()  # every rank process pid a look found alive
        self.missing: set[int] = set()
        self.began_at: float | None = None

    def observe(
        self,
        mpi_up: bool,
        began: Collection[int],
        ranks: Mapping[int, str],
        rank_of: Mapping[int, int] | None = None,
    ) -> str | None:
        """``began``: the pids that began MPI initialisation; ``ranks``: each rank process's
        state letter; ``rank_of``: the MPI rank of each pid seen so far. Why the job can no
        longer start, or None. A pid that ended is no loss while a live process carries its
        rank: a child process a rank runs while it starts carries the rank's environment and,
        while it runs, is taken for the rank (``ranks.rank_processes``); when it ends, the
        rank's own process is there again."""
        if mpi_up:
            return None
        rank_of = rank_of or {}
        if began and self.began_at is None:
            self.began_at = self.clock()
        alive = {pid for pid, st in ranks.items() if st not in GONE}
        self.seen |= alive
        here = {rank_of[pid] for pid in alive if pid in rank_of}
        missing = {
            pid
            for pid in (self.seen | set(began)) - alive
            if began and not (pid in rank_of and rank_of[pid] in here)
        }
        lost = sorted(missing & self.missing)
        self.missing = missing
        if lost:
            pid = lost[0]
            who = f"rank {rank_of[pid]} (pid {pid})" if pid in rank_of else f"rank process {pid}"
            return (
                f"{who} ended before MPI was up on every rank ("
                + ("inside MPI initialisation" if pid in began else "before its MPI initialisation")
                + "): the other ranks could only wait inside MPI_Init for it"
            )
        return self._never_appeared(rank_of)

    def _never_appeared(self, rank_of: Mapping[int, int]) -> str | None:
        """Ranks of this host that no look ever saw, well after another began MPI init.
        Only once some rank was seen: a rank process this host's looks cannot recognise
        (see reaper.rank_states) is not one that never appeared."""
        if self.expect_here is None or self.began_at is None or not rank_of:
            return None
        if self.clock() - self.began_at < self.appear_within:
            return None
        absent = sorted(set(range(self.expect_here)) - set(rank_of.values()))
        if not absent:
            return None
        names = ", ".join(map(str, absent))
        return (
            f"rank{'s' if len(absent) > 1 else ''} {names} never appeared on this host, "
            f"{self.appear_within:g} s after another rank began MPI initialisation (killed or dead "
            "as it started): the other ranks could only wait inside MPI_Init for "
            + ("them" if len(absent) > 1 else "it")
        )


STOPPED_AT_START = 1.0  # seconds a starting rank may stay stopped before it counts as lost (heartbeat_timeout's default)


class StoppedAtStartCheck:
    """Which starting ranks stay stopped (SIGSTOP, state T) for longer than ``limit``: before
    its hello a rank has no heartbeats, and a stopped one would hold the handshake for the
    whole ``startup_timeout`` (an external campaign stopped one there: 21.7 s). A rank seen
    running again starts over."""

    def __init__(
        self, limit: float = STOPPED_AT_START, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit, self.clock = limit, clock
        self.since: dict[int, float] = {}

    def too_long(self, rank: int, state: str | None) -> bool:
        """Feed one look at ``rank``'s process state; True once it was stopped at every look
        for over ``limit`` seconds."""
        if state != "T":  # "t" is a tracer's stop (a debugger): never ours to judge
            self.since.pop(rank, None)
            return False
        now = self.clock()
        return now - self.since.setdefault(rank, now) > self.limit
