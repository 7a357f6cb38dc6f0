"""core/procs: processes by identity, tried as pid reuse and another user would try them.
Real processes throughout; the pid is really reused (the kernel is asked for it)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mixle_mpi.core import procs
from mixle_mpi.launch import ranks, reaper
from mixle_mpi.launch.contract import TAG_ENV


def _reuse_pid(pid: int, argv: list[str]) -> subprocess.Popen:
    """Start ``argv`` as a process with pid ``pid`` (ended and reaped before): the kernel's next
    pid is set where it can be (root: ns_last_pid), else pids are used up until it comes back."""
    try:
        with open("/proc/sys/kernel/ns_last_pid", "w") as fh:
            fh.write(str(pid - 1))
        proc = subprocess.Popen(argv)
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    except OSError:
        pass
    with open("/proc/sys/kernel/pid_max") as fh:
        if int(fh.read()) > 70_000:
            pytest.skip("cannot reuse a pid here: not root, and pid_max too large to wrap around")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        child = os.fork()
        if child == 0:
            os._exit(0)
        os.waitpid(child, 0)
        if (child - pid) % 32768 in range(-3, 0) or child == pid - 1:
            proc = subprocess.Popen(argv)
            if proc.pid == pid:
                return proc
            proc.kill()
            proc.wait()
    pytest.fail("could not get the pid back within 120 s")


def test_a_reused_pid_is_never_signalled_and_the_refusal_is_logged(caplog):
    """The driver's fence, the launcher's forwarder and chaos all signal through kill_same. A
    process they named ends; an unrelated process gets its pid; the signal is refused."""
    first = subprocess.Popen(["sleep", "60"])
    named = procs.identity(first.pid)
    first.kill()
    first.wait()
    time.sleep(0.05)  # a start time is exact to the clock tick (10 ms): see procs
    unrelated = _reuse_pid(named[0], ["sleep", "60"])
    try:
        assert unrelated.pid == named[0] and procs.identity(unrelated.pid) != named
        with caplog.at_level(logging.WARNING, logger="mixle_mpi.procs"):
            assert procs.kill_same(named, signal.SIGKILL, why="a test") is False
        assert unrelated.poll() is None  # untouched
        assert any(
            "now names another process" in r.getMessage() and "a test" in r.getMessage()
            for r in caplog.records
        )
        assert not procs.running(named) and procs.running(procs.identity(unrelated.pid))
    finally:
        unrelated.kill()
        unrelated.wait()


def test_a_driver_whose_pid_was_reused_has_ended_for_a_worker_that_knows_its_start():
    """A worker on the driver's host looks at its process (Setup's driver_pid and
    driver_start): a driver that died and whose pid an unrelated process took has ended."""
    driver = subprocess.Popen(["sleep", "60"])
    pid, start = procs.identity(driver.pid)
    assert not procs.ended(pid, start) and not procs.ended(pid)
    driver.kill()
    driver.wait()
    time.sleep(0.05)
    unrelated = _reuse_pid(pid, ["sleep", "60"])
    try:
        assert unrelated.pid == pid
        assert procs.ended(pid, start)  # its identity: the driver is gone
        assert not procs.ended(pid)  # by its pid alone it would look alive
    finally:
        unrelated.kill()
        unrelated.wait()


@pytest.mark.skipif(os.getuid() != 0, reason="only root can start another user's process to try")
def test_another_users_process_is_never_signalled_even_by_root(caplog):
    """A job run as root (the launcher allows it) refuses to signal another user's process,
    even one it named itself: a planted identity cannot make it kill for someone else."""
    other = subprocess.Popen(["sleep", "60"], user=65534)
    try:
        ident = procs.identity(other.pid)
        with caplog.at_level(logging.WARNING, logger="mixle_mpi.procs"):
            assert procs.kill_same(ident, signal.SIGKILL) is False
        assert other.poll() is None and "belongs to uid 65534" in caplog.text
    finally:
        other.kill()
        other.wait()


def test_identity_is_the_same_text_in_every_process_of_the_host():
    """The driver reads a worker's identity from the worker's own report: both must compute
    the same text for one process."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import os; from mixle_mpi.core import procs; print(procs.identity({os.getpid()})[1])",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == procs.identity(os.getpid())[1]


def test_gone_states_are_one_set():
    """A zombie is gone for every watcher (the birth watch, the launcher, chaos, the fence)."""
    child = subprocess.Popen(["sleep", "60"])
    ident = procs.identity(child.pid)
    os.kill(child.pid, signal.SIGKILL)
    end = time.monotonic() + 10
    while procs.state(child.pid) != "Z" and time.monotonic() < end:
        time.sleep(0.01)
    assert procs.state(child.pid) in procs.GONE and procs.gone(child.pid)
    assert procs.not_reaped(ident) and not procs.running(ident)
    child.wait()
    assert (
        procs.gone(child.pid)
        and procs.identity(child.pid) is None
        and procs.kill_same(ident) is None
    )


def _row(pid, ppid, argv, rank=None):
    env = {} if rank is None else {"PMI_RANK": str(rank)}
    return procs.Row(pid, ppid, "S", tuple(argv), env, "1.00")


def test_a_rank_is_found_whatever_runs_it():
    """``run -- ./fit.py`` (a shebang: the command line is the interpreter's), a compiled
    program, a user's shell wrapper and mixle_mpi's own rank wrapper (and its forked
    subshell): the rank is the innermost process with the rank number (pure)."""
    rows = {
        r.pid: r
        for r in [
            _row(10, 1, ["mpiexec", "-n", "4", "./fit.py"]),
            _row(11, 10, ["/usr/bin/python3.11", "./fit.py"], rank=0),  # shebang script
            _row(12, 10, ["./a.out"], rank=1),  # no interpreter at all
            _row(13, 10, ["bash", "./fit.sh"], rank=2),  # a user's wrapper ...
            _row(14, 13, ["pypy3", "fit.py"], rank=2),  # ... and its rank
            _row(15, 10, ["sh", "/x/rankwrap.sh", "fit"], rank=3),  # our MPICH wrapper
            _row(16, 15, ["sh", "/x/rankwrap.sh", "fit"], rank=3),  # its subshell, forked
        ]
    }
    assert ranks.rank_processes(rows, rows) == [11, 12, 14]  # rank 3 has no process of its own yet
    rows[17] = _row(17, 16, ["fit"], rank=3)
    assert ranks.rank_processes(rows, rows) == [11, 12, 14, 17]


def test_the_launcher_sees_a_shebang_script_rank_by_its_tag(tmp_path):
    """The launcher once looked for processes named python: ``run -- ./fit.py`` was a rank
    that never started. A real shebang script and a shell wrapper around one."""
    script = tmp_path / "fit.py"
    script.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    script.chmod(0o755)
    env = {**os.environ, TAG_ENV: "tag-shebang", "PMI_RANK": "1"}
    direct = subprocess.Popen([str(script)], env=env)
    wrapped = subprocess.Popen(
        ["sh", "-c", textwrap.dedent(f"{script}; true")], env={**env, "PMI_RANK": "2"}
    )
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            states = reaper.rank_states("tag-shebang")
            if len(states) == 2 and wrapped.pid not in states:  # the wrapper's child has started
                break
            time.sleep(0.05)
        inner = [pid for pid in procs.pids() if procs.parent(pid) == wrapped.pid]
        assert set(states) == {direct.pid, *inner} and wrapped.pid not in states
        assert {reaper.rank_number(pid) for pid in states} == {1, 2}
    finally:
        for p in (direct, wrapped):
            p.kill()
        for pid in procs.tagged(TAG_ENV, "tag-shebang"):
            procs.kill_same(procs.identity(pid))
        for p in (direct, wrapped):
            p.wait()
