"""The in-MPI tier: tests that run inside MPI, on every rank, through pytest-mpi.

    mpiexec -n 3 python -m pytest -q --with-mpi tests/mpi

Plain ``pytest`` does not collect this folder (``tests/conftest.py`` ignores it without
``--with-mpi``); ``tests/test_mpi_tier.py`` launches it under each MPI instead.

Every rank runs every test in the same order. Each test gets its own communicator (a
``Dup`` of COMM_WORLD), so a test that fails half-way leaves no message for the next one,
and ends at a bounded barrier, so the ranks stay in step. Every wait has a deadline
(``mpitools``), and a last-resort watchdog (``faulthandler``) dumps every thread's stack
and ends a rank stuck in one test for ``TEST_DEADLINE`` seconds: a hang becomes a failed
tier with a traceback, never a stuck job.
"""

from __future__ import annotations

import faulthandler
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mpitools import Ended, barrier  # noqa: E402

# Seconds one test may take on a rank before the watchdog ends it: far above any test here
# (each takes a few seconds); MIXLE_MPI_TIER_TEST_DEADLINE changes it.
TEST_DEADLINE = float(os.environ.get("MIXLE_MPI_TIER_TEST_DEADLINE", "") or 90)


_WATCHDOG_FD: list[int] = []  # a copy of the real stderr, taken while pytest's capture is off


def pytest_configure(config):
    if not config.getoption("with_mpi", False):
        return
    _WATCHDOG_FD.append(os.dup(2))
    from mpi4py import MPI

    if (
        MPI.Query_thread() < MPI.THREAD_MULTIPLE
    ):  # the driver's monitor and the workers' heartbeats are threads
        raise pytest.UsageError(
            f"the in-MPI tier needs MPI_THREAD_MULTIPLE; got level {MPI.Query_thread()}"
        )


@pytest.fixture(autouse=True)
def _watchdog():
    # Written to the real stderr: inside a test, fd 2 is pytest's capture file, lost on exit.
    faulthandler.dump_traceback_later(
        TEST_DEADLINE, exit=True, file=_WATCHDOG_FD[0] if _WATCHDOG_FD else 2
    )
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def comm():
    """This test's own communicator over every rank; the ranks meet again at its end."""
    from mpi4py import MPI

    c = MPI.COMM_WORLD.Dup()
    yield c
    barrier(c)


@pytest.fixture
def no_exit(monkeypatch):
    """Worker code ends its process (``os._exit``) on stop, abort or a lost driver; here it
    raises :class:`Ended` with the exit code instead, so the pytest rank lives on."""
    from mixle_mpi.runtime import worker

    def fake_exit(code=0):
        raise Ended(code)

    monkeypatch.setattr(os, "_exit", fake_exit)
    monkeypatch.setattr(
        worker, "flush_and_exit", fake_exit, raising=False
    )  # os._exit covers a rename


REPORT_DIR_ENV = "MIXLE_MPI_TIER_REPORT_DIR"


def pytest_sessionfinish(session, exitstatus):
    """With ``MIXLE_MPI_TIER_REPORT_DIR`` set (by ``tests/test_mpi_tier.py``), each rank
    writes its own counts there as ``rank-R.json``: the ranks' terminal output interleaves,
    so the launching test reads these instead of parsing it."""
    folder = os.environ.get(REPORT_DIR_ENV)
    if not folder or not session.config.getoption("with_mpi", False):
        return
    import json

    from mpi4py import MPI

    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = reporter.stats if reporter is not None else {}
    counts = {
        key: len(stats.get(key, []))
        for key in ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
    }
    rank = MPI.COMM_WORLD.Get_rank()
    report = {
        "rank": rank,
        "size": MPI.COMM_WORLD.Get_size(),
        "exitstatus": int(exitstatus),
        "collected": session.testscollected,
        **counts,
    }
    path = os.path.join(folder, f"rank-{rank}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        json.dump(report, fh)
    os.replace(path + ".tmp", path)


def pytest_unconfigure(config):
    while _WATCHDOG_FD:
        os.close(_WATCHDOG_FD.pop())
