"""The driver's last guards against a hung file system, with real processes: the output
that hangs is a pipe nobody reads (every write to it blocks, as on a hung mount)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

FILL_STDERR = """
import fcntl, os
flags = fcntl.fcntl(2, fcntl.F_GETFL)
fcntl.fcntl(2, fcntl.F_SETFL, flags | os.O_NONBLOCK)
try:
    while True:
        os.write(2, b"x" * 4096)
except BlockingIOError:
    pass  # the pipe is full: from now on every write to stderr blocks
fcntl.fcntl(2, fcntl.F_SETFL, flags)
"""


def _run(body: str, timeout: float = 15.0, env: dict | None = None) -> tuple[int | None, float]:
    """Run ``body`` with a stderr nobody reads; its exit code (None: it hung) and seconds."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", body],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    try:
        return proc.wait(timeout=timeout), time.monotonic() - t0
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None, time.monotonic() - t0
    finally:
        proc.stderr.close()


def test_the_watchdog_ends_the_driver_even_when_its_last_log_line_hangs():
    """Before, the watchdog logged first and exited after: a log on a hung file system hung
    the exit for good. It now arms a hard timer before any I/O, and the driver ends, 74."""
    code, seconds = _run(
        """
import time, types
from mixle_mpi.core import logs
from mixle_mpi.runtime import watchdog
logs.setup()
watchdog.EXIT_GRACE = 0.5
"""
        + FILL_STDERR
        + """
monitor = types.SimpleNamespace(passed_at=time.monotonic() - 100.0)  # MPI stuck
watchdog.Watchdog(monitor, limit=0.5, check_every=0.05).start()
time.sleep(60)
"""
    )
    assert code == 74, f"exit {code} after {seconds:.1f} s (None: hung)"
    assert seconds < 20


def test_a_driver_blocked_reading_its_input_is_ended_not_left_hanging(tmp_path):
    """Before, the main thread was watched only inside fit(): a driver blocked while it read
    its input (here a named pipe nobody writes, as a hung mount) kept its workers waiting
    for good. It is now watched from its start to its exit, and ends with 74."""
    data = tmp_path / "data.csv"
    os.mkfifo(data)
    body = f"""
from mixle_mpi.cli import fitcmd, jobconfig
from mixle_mpi.core import logs
from mixle_mpi.policy import heartbeat
from mixle_mpi.runtime import handle
logs.setup()
handle.is_driver = lambda: True  # rank 0 of a job: no MPI is needed to read the input
heartbeat.WATCHDOG_MARGIN = 0.0
flags = {{"model": "gmm:k=2", "data": {str(data)!r}, "out_dir": {str(tmp_path / "out")!r}}}
fitcmd.run(jobconfig.resolve(None, flags))
"""
    code, seconds = _run(body, env={"MIXLE_MPI_RECONFIGURE_TIMEOUT": "1"})
    assert code == 74, f"exit {code} after {seconds:.1f} s (None: hung)"
