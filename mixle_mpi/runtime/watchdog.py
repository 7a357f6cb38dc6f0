"""The driver's last guard against a hang inside the MPI library itself, or anywhere else in
its main thread.

Every wait of ours has a deadline, but one call into MPI can block inside the library: seen
with MPICH over libfabric's tcp provider after a worker on another host died, where a call
waits for good holding MPICH's global lock, so every other MPI call of the driver waits
too, and no deadline of ours is ever looked at. The heartbeat thread then completes no
pass. This thread makes no MPI call: when no pass has completed for longer than the limit
(``policy/heartbeat.listener_stuck``), it ends the driver with exit 74 and one line that
says why. The checkpoint is intact (it is replaced atomically), so a rerun resumes.

It also watches the main thread: a main thread blocked outside MPI (a write to a hung file
system, a user's callback that never returns) leaves the heartbeat thread beating, so the
workers would wait for good. When the main thread passed no mark of its wait loops
(``core/liveness``) for longer than the limit and did not compute meanwhile
(``policy/heartbeat.main_thread_stuck``), it ends the driver the same way. The fit's
handle watches it during a fit; ``main_thread_watched`` watches it from a driver's start
(reading the input, building the store) to its exit (writing its results), with a watchdog
of its own (no monitor), and the handle's then watches MPI only.

Its own last words (a log line, ``status.json``) go to the same file systems that may hang,
so before it writes anything it arms a hard timer (``EXIT_GRACE`` seconds, a thread of its
own that does no I/O) that ends the process with 74 whatever the writes do.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager

from mixle_mpi.core import exitcodes, liveness, logs
from mixle_mpi.policy.heartbeat import listener_stuck, main_thread_stuck

EXIT_GRACE = 5.0  # seconds the watchdog's last log line and status.json may take


_process_watch: list = []  # the watchdog of main_thread_watched, while it runs


@contextmanager
def main_thread_watched(limit: float):
    """Watch this process's main thread for the whole block (a driver from its start to
    its exit): blocked for ``limit`` seconds without computing, it ends the process (74)."""
    dog = Watchdog(None, limit)
    _process_watch.append(dog)
    dog.start()
    try:
        with liveness.watched():
            yield
    finally:
        dog.stop()
        _process_watch.remove(dog)


class Watchdog:
    """Watches the heartbeat thread's passes (``monitor``; None: not), and the main thread's
    marks unless a ``main_thread_watched`` block watches them already."""

    def __init__(self, monitor, limit: float, check_every: float = 1.0, end=None) -> None:
        self.monitor = monitor
        self.main = monitor is None or not _process_watch
        self.limit = limit
        self.check_every = check_every
        self._end = end or _end_driver
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="mixle-mpi-watchdog")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        cpu = _MainCPU()
        while not self._stop.wait(self.check_every):
            why = self._verdict(cpu)
            if why is not None and not self._stop.is_set():
                self._end(why + ". The checkpoint is intact: run the same command again to resume")
                return

    def _verdict(self, cpu: "_MainCPU") -> str | None:
        now = time.monotonic()
        stuck = (
            listener_stuck(self.monitor.passed_at, now, self.limit)
            if self.monitor is not None
            else None
        )
        if stuck is not None:
            return (
                f"the driver's MPI library made no progress for {stuck:.0f} s (a call into it blocked: its "
                f"heartbeat thread completed no pass; limit {self.limit:g} s, reconfigure_timeout + 30 s)"
            )
        marked = liveness.marked_at()
        stuck = (
            main_thread_stuck(marked, now, cpu.since(marked), self.limit)
            if self.main and liveness.armed()
            else None
        )
        if stuck is not None:
            return (
                f"the driver's main thread made no progress for {stuck:.0f} s and computed nothing meanwhile "
                f"(blocked outside MPI: a file system that hangs, or a callback that never returns; limit "
                f"{self.limit:g} s, reconfigure_timeout + 30 s)"
            )
        return None


class _MainCPU:
    """The main thread's CPU seconds since its last liveness mark (sampled at each look)."""

    def __init__(self) -> None:
        self.mark, self.at_mark = None, liveness.main_cpu_seconds()

    def since(self, marked: float) -> float:
        now = liveness.main_cpu_seconds()
        if now is None:
            return float("inf")  # cannot tell: never call it stuck
        if marked != self.mark:
            self.mark, self.at_mark = marked, now
        return now - (self.at_mark if self.at_mark is not None else now)


def arm_hard_exit(code: int, seconds: float | None = None) -> threading.Timer:
    """End this process with ``code`` in ``seconds`` whatever its other threads are blocked
    in: a timer thread that does no I/O (os._exit needs no lock and writes nothing)."""
    timer = threading.Timer(EXIT_GRACE if seconds is None else seconds, os._exit, (code,))
    timer.daemon = True
    timer.name = "mixle-mpi-hard-exit"
    timer.start()
    return timer


def _end_driver(message: str) -> None:
    from mixle_mpi.runtime.exiting import write_status

    arm_hard_exit(exitcodes.RERUN_TO_RESUME)  # before any I/O: the file system may hang
    logs.get("driver").error(message)
    try:
        write_status(exitcodes.RERUN_TO_RESUME, message, reported=True)
    finally:
        os._exit(exitcodes.RERUN_TO_RESUME)
