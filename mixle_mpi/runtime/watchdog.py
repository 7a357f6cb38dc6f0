"""The driver's last guard against a hang inside the MPI library itself.

Every wait of ours has a deadline, but one call into MPI can block inside the library: seen
with MPICH over libfabric's tcp provider after a worker on another host died, where a call
waits for good holding MPICH's global lock, so every other MPI call of the driver waits
too, and no deadline of ours is ever looked at. The heartbeat thread then completes no
pass. This thread makes no MPI call: when no pass has completed for longer than the limit
(``policy/heartbeat.listener_stuck``), it ends the driver with exit 74 and one line that
says why. The checkpoint is intact (it is replaced atomically), so a rerun resumes.
"""

from __future__ import annotations

import os
import threading
import time

from mixle_mpi.core import exitcodes, logs
from mixle_mpi.policy.heartbeat import listener_stuck


class Watchdog:
    def __init__(self, monitor, limit: float, check_every: float = 1.0, end=None) -> None:
        self.monitor = monitor
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
        while not self._stop.wait(self.check_every):
            stuck = listener_stuck(self.monitor.passed_at, time.monotonic(), self.limit)
            if stuck is not None and not self._stop.is_set():
                self._end(f"the driver's MPI library made no progress for {stuck:.0f} s (a call into it "
                          f"blocked: its heartbeat thread completed no pass; limit {self.limit:g} s, "
                          "reconfigure_timeout + 30 s). The checkpoint is intact: run the same command "
                          "again to resume")
                return


def _end_driver(message: str) -> None:
    from mixle_mpi.runtime.exiting import write_status

    logs.get("driver").error(message)
    try:
        write_status(exitcodes.RERUN_TO_RESUME, message, reported=True)
    finally:
        os._exit(exitcodes.RERUN_TO_RESUME)
