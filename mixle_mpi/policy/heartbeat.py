"""Heartbeat bookkeeping as plain data: who was last heard when, and who is overdue.

The MPI layer feeds arrivals in and asks for overdue workers; the clock is injected so
deadlines are unit-tested without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable


class HeartbeatTracker:
    """Last-heard times per worker; a worker silent for longer than ``timeout`` is overdue."""

    def __init__(self, timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = float(timeout)
        self.clock = clock
        self._last: dict[int, float] = {}  # when its deadline last started: heard, or watched
        self._heard: dict[int, float] = {}  # when it was last heard (a beat, or a relay's word)
        self._grace: dict[int, float] = {}
        self._hop: dict[int, float] = {}  # extra allowance of a worker heard through a relay

    def watch(self, workers: Iterable[int]) -> None:
        """Start (or restart) the deadline of each worker from now: a fresh grace period."""
        now = self.clock()
        for w in workers:
            self._last[w] = now

    def forget(self, worker: int) -> None:
        self._last.pop(worker, None)
        self._heard.pop(worker, None)
        self._grace.pop(worker, None)
        self._hop.pop(worker, None)

    def set_hop(self, worker: int, seconds: float) -> None:
        """``worker`` is heard through a relay, ``seconds`` late at most (0: directly again)."""
        if seconds > 0:
            self._hop[worker] = float(seconds)
        else:
            self._hop.pop(worker, None)

    def set_grace(self, worker: int, seconds: float) -> None:
        """A longer allowance for one worker (0 or less: back to ``timeout``), from now."""
        if seconds > 0:
            self._grace[worker] = float(seconds)
        else:
            self._grace.pop(worker, None)
        if worker in self._last:
            self._last[worker] = self.clock()

    def limit(self, worker: int) -> float:
        return max(self.timeout, self._grace.get(worker, 0.0)) + self._hop.get(worker, 0.0)

    def heard(self, worker: int) -> None:
        if worker in self._last:
            self._last[worker] = self._heard[worker] = self.clock()

    def heard_ago(self, worker: int, age: float) -> None:
        """A relay heard ``worker`` ``age`` seconds ago (never moves its last time back)."""
        if worker in self._last:
            at = self.clock() - max(age, 0.0)
            self._last[worker] = max(self._last[worker], at)
            self._heard[worker] = max(self._heard.get(worker, at), at)

    def heard_since(self, worker: int, since: float) -> bool:
        """``worker`` was heard after ``since`` (a fresh deadline from ``watch`` is not a
        hearing)."""
        return self._heard.get(worker, float("-inf")) > since

    def silence(self, worker: int) -> float:
        """Seconds since the worker was last heard."""
        return self.clock() - self._last[worker]

    def overdue(self) -> list[int]:
        """Watched workers silent for longer than their limit, in id order."""
        now = self.clock()
        if not self._grace and not self._hop:  # every limit(w) is the timeout: no call per worker
            limit = max(self.timeout, 0.0)
            return sorted(w for w, t in self._last.items() if now - t > limit)
        return sorted(w for w, t in self._last.items() if now - t > self.limit(w))

    @property
    def watched(self) -> list[int]:
        return sorted(self._last)


class StallTracker:
    """Whose main thread is stuck: busy with a task, yet no progress for ``timeout`` seconds.

    Heartbeats alone cannot tell: the heartbeat thread lives on while the main thread sits
    in a deadlocked C call. A long but healthy E-step reports progress after every
    sub-chunk, so it is never taken for a stall unless one sub-chunk alone outlasts
    ``timeout``."""

    def __init__(self, timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = float(timeout)
        self.clock = clock
        self._seen: dict[int, tuple[int, float]] = {}  # worker -> (progress, when it last moved)

    def observe(self, worker: int, progress: int, busy: bool) -> None:
        """Feed one heartbeat's report. An idle worker is never stalled."""
        if not busy:
            self._seen.pop(worker, None)
            return
        last = self._seen.get(worker)
        if last is None or last[0] != progress:
            self._seen[worker] = (progress, self.clock())

    def forget(self, worker: int) -> None:
        self._seen.pop(worker, None)

    def stalled(self) -> dict[int, float]:
        """Busy workers whose progress has not moved for longer than ``timeout``: seconds."""
        now, timeout = self.clock(), self.timeout
        late = sorted(w for w, (_, t) in self._seen.items() if now - t > timeout)  # sort only these
        return {w: now - self._seen[w][1] for w in late}


def answer_due(beats_heard: int, note_pending: bool) -> bool:
    """Whether the driver beats back to a worker in this pass: only when it heard the worker
    since its last answer (or has something to tell it). A dead worker is then sent nothing
    more: under MPICH every message to a dead local rank keeps one of the sender's
    shared-memory cells for good, and with all of them gone (64 by default) the driver can
    send to nobody (``bench/results/mpich_cells.md``)."""
    return beats_heard > 0 or note_pending


def driver_silence_limit(driver_timeout: float, last_heard: float, quiet_until: float) -> float:
    """Seconds of silence after which a worker takes its driver for gone: ``driver_timeout``,
    plus the stretch of silence the driver announced (``protocol.Quiet``) beyond the moment
    it was last heard."""
    return driver_timeout + max(0.0, quiet_until - last_heard)


WATCHDOG_MARGIN = (
    30.0  # seconds past reconfigure_timeout: the driver's own deadlines always act first
)


def listener_stuck(passed_at: float, now: float, limit: float) -> float | None:
    """Seconds the driver's heartbeat thread has not completed a pass, when that is over
    ``limit`` (then a call into the MPI library is blocking it, and every other one); None
    while it is fine."""
    silent = now - passed_at
    return silent if silent > limit else None


MAIN_BUSY_SHARE = (
    0.1  # of one core: a main thread that used more than this while silent is computing, not stuck
)


def main_thread_stuck(
    marked_at: float,
    now: float,
    cpu_since_mark: float,
    limit: float,
    busy_share: float = MAIN_BUSY_SHARE,
) -> float | None:
    """Seconds the driver's main thread has been stuck, when it is (pure): it passed none of
    its wait loops' marks (``core/liveness``) for over ``limit`` and used less than
    ``busy_share`` of a core meanwhile, so it is not computing (an M-step of a large model
    may take minutes) but blocked outside MPI: a write to a hung file system, a read of the
    shard store, a user's callback. Its heartbeat thread goes on, so nothing else would
    ever end the job."""
    silent = now - marked_at
    if silent <= limit or cpu_since_mark > busy_share * silent:
        return None
    return silent
