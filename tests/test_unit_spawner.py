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

from mixle_mpi.core.settings import Settings


def _spawner(unavailable: str | None = None, **settings):
    from mixle_mpi.runtime.spawner import Spawner

    return Spawner(Settings(**settings), ["python", "script.py"], None, unavailable)


def _background(fn):
    from mixle_mpi.core.deadlines import Background

    return Background(fn, "spawn")


def _underway(call, since, record=None):
    """A background Spawn, watched through the birth record at ``record`` (a path) if given."""
    from mixle_mpi.runtime.birth import SpawnDeathCheck
    from mixle_mpi.runtime.spawner import Underway

    return Underway(call, since, SpawnDeathCheck(record) if record else None)


def _dead_record(tmp_path) -> str:
    """A birth record of a process that has ended (a real one, started and waited for)."""
    import socket
    import subprocess

    from mixle_mpi.core import procs

    proc = subprocess.Popen(["sleep", "30"])
    ident = procs.identity(proc.pid)
    proc.kill()
    proc.wait()
    path = tmp_path / "birth"
    path.write_text(f"{socket.gethostname()} {ident[0]} {ident[1]} {procs.pid_space()}\n")
    return str(path)


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
    spawner.running = {
        2: _underway(failed, time.monotonic()),
        3: _underway(running, time.monotonic()),
    }
    ended = spawner.finished(time.monotonic())
    assert [w for w, _ in ended] == [2] and ended[0][1].why and not ended[0][1].died, (
        ended
    )  # spawning failed
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
    spawner.running = {4: _underway(stuck, time.monotonic() - 3.0)}
    assert spawner.finished(time.monotonic()) == [
        (4, module.SpawnFailed("spawn did not finish within 2 s"))
    ]
    assert spawner.running == {} and checked == ["spawn did not finish within 2 s"]
    release.set()
    stuck.thread.join(5)


def test_at_exit_a_spawn_under_way_gets_the_rest_of_its_deadline_and_no_more():
    spawner = _spawner(reconfigure_timeout=1.0)
    release = threading.Event()
    soon, stuck = _background(lambda: time.sleep(0.2)), _background(lambda: release.wait(30))
    spawner.running = {2: _underway(soon, time.monotonic()), 3: _underway(stuck, time.monotonic())}
    t0 = time.monotonic()
    spawner.settle()
    assert soon.done() and not stuck.done()
    assert 0.5 < time.monotonic() - t0 < 5.0  # it waited for the deadline, bounded
    release.set()
    stuck.thread.join(5)


def test_at_exit_a_spawn_gets_at_most_exit_wait_which_ends_before_the_launcher_kills_the_job(
    monkeypatch,
):
    from mixle_mpi.launch.jobchecks import FINISH_GRACE
    from mixle_mpi.runtime import spawner as module

    assert (
        module.EXIT_WAIT < FINISH_GRACE
    )  # the driver exits before the launcher gives up on its ranks
    monkeypatch.setattr(module, "EXIT_WAIT", 0.5)
    spawner = _spawner(reconfigure_timeout=60.0)
    release = threading.Event()
    stuck = _background(lambda: release.wait(30))
    spawner.running = {2: _underway(stuck, time.monotonic())}
    t0 = time.monotonic()
    spawner.settle()
    assert time.monotonic() - t0 < 5.0 and not stuck.done() and list(spawner.running) == [2]
    release.set()
    stuck.thread.join(5)


def test_a_background_spawn_whose_process_died_is_given_up_at_once(monkeypatch, tmp_path):
    """Its birth record names a process that is gone: the Spawn can never end (Open MPI and
    MPICH alike), so the place is handed back long before reconfigure_timeout."""
    from mixle_mpi.runtime import spawner as module

    checked: list = []
    monkeypatch.setattr(module, "check_mpi_answers", checked.append)
    spawner = _spawner(reconfigure_timeout=60.0)
    release = threading.Event()
    stuck, record = _background(lambda: release.wait(30)), _dead_record(tmp_path)
    spawner.running = {2: _underway(stuck, time.monotonic(), record)}
    ((worker, failed),) = spawner.finished(time.monotonic())
    assert (
        worker == 2
        and failed.died
        and failed.why
        == f"spawn given up: its process (pid {failed.pid}) died before it had joined MPI"
    )
    assert spawner.running == {} and checked == [
        failed.why
    ]  # MPI answers: the place may get another Spawn
    assert not (tmp_path / "birth").exists()  # the record is cleaned up with the Spawn
    release.set()
    stuck.thread.join(5)


def test_a_background_spawn_whose_process_never_showed_on_this_host_is_given_up_as_a_death(
    monkeypatch, tmp_path
):
    """Killed before any look found it (external campaign, MPICH seed 906: 16 ms after it
    appeared): where it surely starts on this host, not seen within APPEAR_WITHIN is a death."""
    from mixle_mpi.runtime import birth
    from mixle_mpi.runtime import spawner as module
    from mixle_mpi.runtime.spawner import Underway

    checked: list = []
    monkeypatch.setattr(module, "check_mpi_answers", checked.append)
    spawner = _spawner(reconfigure_timeout=60.0)
    release = threading.Event()
    stuck = _background(lambda: release.wait(30))
    clock = [100.0]
    here = birth.SpawnDeathCheck(str(tmp_path / "never-here"), here=True, clock=lambda: clock[0])
    elsewhere = birth.SpawnDeathCheck(
        str(tmp_path / "never-there"), here=False, clock=lambda: clock[0]
    )
    spawner.running = {
        2: Underway(stuck, time.monotonic(), here),
        3: Underway(stuck, time.monotonic(), elsewhere),
    }
    clock[0] += birth.APPEAR_WITHIN - 0.5
    assert spawner.finished(time.monotonic()) == []  # within its time: it may still show
    clock[0] += 1.0
    ((worker, failed),) = spawner.finished(time.monotonic())
    assert (
        worker == 2
        and failed.died
        and failed.pid is None
        and "was not seen on this host within" in failed.why
    )
    assert list(spawner.running) == [3] and checked == [
        failed.why
    ]  # the one on another host waits its deadline
    release.set()
    stuck.thread.join(5)


def test_a_background_spawn_whose_process_runs_or_has_not_written_yet_goes_on(tmp_path):
    import os
    import socket

    from mixle_mpi.core import procs

    spawner = _spawner(reconfigure_timeout=60.0)
    release = threading.Event()
    alive = tmp_path / "alive"
    alive.write_text(
        f"{socket.gethostname()} {os.getpid()} {procs.identity(os.getpid())[1]} {procs.pid_space()}\n"
    )
    a, b = _background(lambda: release.wait(30)), _background(lambda: release.wait(30))
    spawner.running = {
        2: _underway(a, time.monotonic(), str(alive)),
        3: _underway(b, time.monotonic(), str(tmp_path / "not-yet")),
    }
    assert spawner.finished(time.monotonic()) == [] and sorted(spawner.running) == [2, 3]
    release.set()
    a.thread.join(5)
    b.thread.join(5)


def test_at_exit_a_spawn_whose_process_died_is_not_waited_for(tmp_path):
    spawner = _spawner(reconfigure_timeout=60.0)
    release = threading.Event()
    stuck, record = _background(lambda: release.wait(30)), _dead_record(tmp_path)
    spawner.running = {2: _underway(stuck, time.monotonic(), record)}
    t0 = time.monotonic()
    spawner.settle()
    assert time.monotonic() - t0 < 1.0 and list(spawner.running) == [
        2
    ]  # still there: the driver reports it
    assert not (tmp_path / "birth").exists()
    release.set()
    stuck.thread.join(5)


def test_the_fast_entry_is_told_where_to_write_its_birth_record_and_the_script_is_not(monkeypatch):
    """Only mixle_mpi's own entry takes ``--birth``; the user's script gets its own arguments."""
    from mixle_mpi.runtime import birth
    from mixle_mpi.runtime import spawner as module

    calls: list = []

    def spawn_on(host, exe, args):
        calls.append([exe, *args])
        raise RuntimeError("no MPI here")

    monkeypatch.setattr(module, "spawn_on", spawn_on)
    fast = ["python", "-m", "mixle_mpi.runtime.replacement_entry"]
    spawner = module.Spawner(Settings(), ["python", "script.py", "--its", "3"], fast, None)
    spawner.background = True
    spawner.start(2, None, (b"enc", b"model"))
    spawner.start(3, None, (b"enc", b"a __main__ class"))  # only the script can unpickle it
    for underway in spawner.running.values():
        underway.call.thread.join(5)
    record = spawner.running[2].watch.path
    assert record and spawner.running[3].watch is None
    assert calls == [
        fast + [birth.ARG, record, birth.DRIVER_ARG, birth.driver_arg()],
        ["python", "script.py", "--its", "3"],
    ]


def test_a_spawn_that_connected_leaves_its_process_pid_for_the_driver_to_watch(tmp_path):
    """Its birth record names a process of this host: the driver sees its end while it
    joins (its heartbeats have a grace then). The record itself is removed."""
    import os
    import socket

    from mixle_mpi.core import procs

    spawner = _spawner(reconfigure_timeout=60.0)
    record = tmp_path / "born"
    record.write_text(
        f"{socket.gethostname()} {os.getpid()} {procs.identity(os.getpid())[1]} {procs.pid_space()}\n"
    )
    connected = _background(lambda: "link")
    connected.thread.join(5)
    spawner.running = {2: _underway(connected, time.monotonic(), str(record))}
    assert spawner.finished(time.monotonic()) == [(2, "link")]
    assert spawner.born == {2: procs.identity(os.getpid())} and not record.exists()


def test_a_replacement_is_spawned_with_the_variables_its_bits_depend_on():
    """A Spawn on another host starts from that host's daemon's environment (Open MPI): the
    replacement had neither the BLAS core type nor the numerics mark, and was refused."""
    from mixle_mpi.runtime.spawner import with_bits_env

    env = {"OPENBLAS_CORETYPE": "Haswell", "MIXLE_MPI_NUMERICS": "auto", "HOME": "/root"}
    exe, args = with_bits_env("python", ["-m", "x"], env)
    assert exe == "/usr/bin/env" and args[-3:] == ["python", "-m", "x"]
    assert "OPENBLAS_CORETYPE=Haswell" in args and "MIXLE_MPI_NUMERICS=auto" in args
    assert not any(a.startswith("HOME=") for a in args)
    assert with_bits_env("python", ["-m", "x"], {}) == ("python", ["-m", "x"])
