"""The driver's clock for its deadlines: the real monotonic clock, or a simulation's.

The driver's collaborators (its rounds, joins, control replies and the end of the job) read
their deadlines from here, so that ``mixle_mpi.sim`` can run the very same code in simulated
time: a hung worker's deadline passes in a simulated minute, not a real one. Durations that
are only measured (``time.perf_counter``) stay real.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_now: Callable[[], float] = time.monotonic


def monotonic() -> float:
    """Seconds on the current clock (``time.monotonic`` unless a simulation runs)."""
    return _now()


@contextmanager
def simulated(now: Callable[[], float]) -> Iterator[None]:
    """Within the block, ``monotonic()`` is ``now()`` (single-threaded: a simulation)."""
    global _now
    before, _now = _now, now
    try:
        yield
    finally:
        _now = before
