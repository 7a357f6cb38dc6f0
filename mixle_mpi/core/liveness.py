"""The main thread's sign of life, for the driver's watchdog (``runtime/watchdog.py``).

The heartbeat thread beats whatever the main thread does, so a main thread blocked for good
(a write to a hung file system, say) looks alive to everyone. Each of the main thread's own
wait loops marks that it went round (``mark``, a single store; a call from any other thread
is ignored); the watchdog ends the driver when no mark came for too long and the main
thread did not compute meanwhile (``policy.heartbeat.main_thread_stuck``). Only while the
main thread runs a fit of ours (``watched``): between fits it is the caller's to spend.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

_MAIN = threading.main_thread().ident
_marked = [time.monotonic()]
_armed = [0]


def mark() -> None:
    """The main thread is going round one of its loops (no-op on any other thread)."""
    if threading.get_ident() == _MAIN:
        _marked[0] = time.monotonic()


def marked_at() -> float:
    return _marked[0]


def main_cpu_seconds() -> float | None:
    """CPU seconds the main thread has used, where the platform can tell."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(_MAIN))
    except (AttributeError, OSError):
        return None


@contextmanager
def watched():
    """The main thread runs one of our fits: the watchdog may judge it from now on."""
    _armed[0] += 1
    mark()
    try:
        yield
    finally:
        _armed[0] -= 1
        mark()


def armed() -> bool:
    return _armed[0] > 0
