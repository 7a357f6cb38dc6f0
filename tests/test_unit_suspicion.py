"""The detector's verdicts (policy/suspicion.py) and the process look they rest on
(core/procs.look) on real processes: gone, stopped and alive are told apart."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from mixle_mpi.core import procs
from mixle_mpi.policy.suspicion import Look, Suspicions

SILENT = "heartbeat: silent for 1.20 s (limit 1 s)"


def test_a_ulfm_error_a_stall_or_a_worker_on_another_host_is_failed_at_once():
    s = Suspicions(max_wait=10)
    assert s.judge(1, "ulfm: peer failed", Look("R", 1.0), 0).confirm
    assert s.judge(2, "stalled: beats, but ...", Look("R", 1.0), 0).confirm
    assert s.judge(3, SILENT, None, 0).confirm  # no process to look at here
    assert s.open == {}


def test_a_gone_or_stopped_process_is_failed_at_the_first_suspicion():
    s = Suspicions(max_wait=10)
    gone = s.judge(1, SILENT, Look(None), 0)
    zombie = s.judge(2, SILENT, Look("Z", 3.0), 0)
    stopped = s.judge(3, SILENT, Look("T", 3.0), 0)
    assert gone.confirm and "gone" in gone.why
    assert zombie.confirm and "gone" in zombie.why
    assert stopped.confirm and "stopped" in stopped.why
    assert s.open == {}


def test_a_live_process_gets_one_more_timeout_and_is_cleared_once_heard():
    s = Suspicions(max_wait=10)
    first = s.judge(1, SILENT, Look("S", 2.0), 100.0)
    assert not first.confirm and "one more timeout" in first.why
    assert s.cleared(lambda w, t: False) == {} and 1 in s.open
    cleared = s.cleared(lambda w, t: w == 1 and t == 100.0)
    assert list(cleared) == [1] and cleared[1].looks == 1 and s.open == {}


def test_a_starved_process_waits_while_runnable_or_using_cpu_up_to_max_wait():
    s = Suspicions(max_wait=5)
    assert not s.judge(1, SILENT, Look("R", 2.0), 0).confirm
    assert not s.judge(1, SILENT, Look("R", 2.0), 1).confirm  # runnable, no CPU: starved
    assert not s.judge(1, SILENT, Look("S", 2.5), 2).confirm  # sleeping, but it ran
    late = s.judge(1, SILENT, Look("R", 3.0), 5)
    assert late.confirm and "still silent 5.0 s" in late.why and s.open == {}


def test_a_silent_process_that_sleeps_and_uses_no_cpu_is_hung():
    s = Suspicions(max_wait=10)
    assert not s.judge(1, SILENT, Look("S", 2.0), 0).confirm
    hung = s.judge(1, SILENT, Look("S", 2.0), 1.1)
    assert hung.confirm and "used no CPU for 1.1 s (hung)" in hung.why


def test_a_failed_worker_is_no_longer_suspected():
    s = Suspicions(max_wait=10)
    s.judge(1, SILENT, Look("S", 2.0), 0)
    s.forget(1)
    assert s.open == {}


def test_the_look_at_a_real_process_tells_running_stopped_and_gone_apart():
    code = "import time\nt = time.time() + 30\nwhile time.time() < t: pass"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.3)
        ident = procs.identity(proc.pid)
        state, cpu = procs.look(ident)
        assert state == "R" and cpu is not None and cpu > 0
        assert procs.look((proc.pid, "0.00")) == (None, None)  # another process's identity
        proc.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while procs.look(ident)[0] != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert procs.look(ident)[0] == "T"
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert procs.look(ident) == (None, None)
