"""Getting a replacement connected (runtime/spawner.py), where no real Spawn is needed: a
launch where spawning cannot work, a background Spawn that failed or overran its deadline,
and the wait for them at exit. Real Spawns are in every respawn test (tests/test_chaos.py).

The module imports mpi4py's MPI, and collecting this file must not initialize MPI in
pytest's process (tests/test_unit_dryrun.py checks a dry run never does): it is imported by
the tests themselves.
"""

from __future__ import annotations

import threading
import time

import pytest

from mixle_mpi.policy.config import Settings


def _spawner(unavailable: str | None = None, **settings):
    from mixle_mpi.runtime.spawner import Spawner

    return Spawner(Settings(**settings), ["python", "script.py"], None, unavailable)


def _background(fn):
    from mixle_mpi.core.deadlines import Background

    return Background(fn, "spawn")


def test_where_spawning_cannot_work_nothing_is_started_and_the_reason_is_given():
    from mixle_mpi.runtime.spawner import SpawnUnavailable

    spawner = _spawner("srun --mpi=pmix cannot spawn")
    with pytest.raises(SpawnUnavailable, match="srun --mpi=pmix cannot spawn"):
        spawner.start(2, "node1", (b"encoder", b"model"))
    assert spawner.running == {}


def test_a_failed_background_spawn_is_handed_over_with_its_error_and_a_running_one_stays():
    from mpi4py import MPI

    spawner = _spawner(reconfigure_timeout=30.0)
    release = threading.Event()

    def refused():
        raise MPI.Exception(MPI.ERR_SPAWN)

    failed, running = _background(refused), _background(lambda: release.wait(30))
    failed.thread.join(5)
    spawner.running = {2: (failed, time.monotonic()), 3: (running, time.monotonic())}
    ended = spawner.finished(time.monotonic())
    assert [w for w, _ in ended] == [2] and isinstance(ended[0][1], str) and ended[0][1], ended
    assert list(spawner.running) == [3]
    release.set()
    running.thread.join(5)


def test_a_background_spawn_past_its_deadline_is_given_up_once_mpi_is_checked(monkeypatch):
    from mixle_mpi.runtime import spawner as module

    checked: list = []  # MPI is not initialized in pytest's process: the check itself is left out here
    monkeypatch.setattr(module, "check_mpi_answers", checked.append)
    spawner = _spawner(reconfigure_timeout=2.0)
    release = threading.Event()
    stuck = _background(lambda: release.wait(30))
    spawner.running = {4: (stuck, time.monotonic() - 3.0)}
    assert spawner.finished(time.monotonic()) == [(4, "spawn did not finish within 2 s")]
    assert spawner.running == {} and checked == ["spawn did not finish within 2 s"]
    release.set()
    stuck.thread.join(5)


def test_at_exit_a_spawn_under_way_gets_the_rest_of_its_deadline_and_no_more():
    spawner = _spawner(reconfigure_timeout=1.0)
    release = threading.Event()
    soon, stuck = _background(lambda: time.sleep(0.2)), _background(lambda: release.wait(30))
    spawner.running = {2: (soon, time.monotonic()), 3: (stuck, time.monotonic())}
    t0 = time.monotonic()
    spawner.settle()
    assert soon.done() and not stuck.done()
    assert 0.5 < time.monotonic() - t0 < 5.0  # it waited for the deadline, bounded
    release.set()
    stuck.thread.join(5)


def test_at_exit_a_spawn_gets_at_most_exit_wait_which_ends_before_the_launcher_kills_the_job(monkeypatch):
    from mixle_mpi.policy.jobwatch import FINISH_GRACE
    from mixle_mpi.runtime import spawner as module

    assert module.EXIT_WAIT < FINISH_GRACE  # the driver exits before the launcher gives up on its ranks
    monkeypatch.setattr(module, "EXIT_WAIT", 0.5)
    spawner = _spawner(reconfigure_timeout=60.0)
    release = threading.Event()
    stuck = _background(lambda: release.wait(30))
    spawner.running = {2: (stuck, time.monotonic())}
    t0 = time.monotonic()
    spawner.settle()
    assert time.monotonic() - t0 < 5.0 and not stuck.done() and list(spawner.running) == [2]
    release.set()
    stuck.thread.join(5)
