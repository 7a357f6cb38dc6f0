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
        self._last: dict[int, float] = {}
        self._grace: dict[int, float] = {}

    def watch(self, workers: Iterable[int]) -> None:
        """Start (or restart) the deadline of each worker from now: a fresh grace period."""
        now = self.clock()
        for w in workers:
            self._last[w] = now

    def forget(self, worker: int) -> None:
        self._last.pop(worker, None)
        self._grace.pop(worker, None)

    def set_grace(self, worker: int, seconds: float) -> None:
        """A longer allowance for one worker (0 or less: back to ``timeout``), from now."""
        if seconds > 0:
            self._grace[worker] = float(seconds)
        else:
            self._grace.pop(worker, None)
        if worker in self._last:
            self._last[worker] = self.clock()

    def limit(self, worker: int) -> float:
        return max(self.timeout, self._grace.get(worker, 0.0))

    def heard(self, worker: int) -> None:
        if worker in self._last:
            self._last[worker] = self.clock()

    def silence(self, worker: int) -> float:
        """Seconds since the worker was last heard."""
        return self.clock() - self._last[worker]

    def overdue(self) -> list[int]:
        """Watched workers silent for longer than their limit, in id order."""
        now = self.clock()
        return sorted(w for w, t in self._last.items() if now - t > self.limit(w))

    @property
    def watched(self) -> list[int]:
        return sorted(self._last)
