"""A replacement's birth record (runtime/birth.py) and its entry's arguments (runtime/replacement_entry.py):
what lets the driver give up at once on a Spawn whose process died. The Spawner's use of it
is in tests/test_unit_spawner.py, real deaths inside a Spawn in tests/test_chaos.py."""

from __future__ import annotations

import os
import socket
import subprocess
import time

from mixle_mpi.core import procs
from mixle_mpi.runtime import birth
from mixle_mpi.runtime.replacement_entry import options

HERE = socket.gethostname()
SPACE = procs.pid_space()


def test_a_record_names_this_process_and_says_nothing_while_it_runs(tmp_path):
    path = str(tmp_path / "b")
    birth.write(path)
    assert birth.read(path) == (HERE, procs.identity(os.getpid()))
    assert birth.died(path) is None
    birth.remove(path)
    assert not os.path.exists(path)
    birth.remove(path)  # twice is harmless: the replacement and the driver both clean up


def test_a_process_that_ended_is_reported_with_its_pid(tmp_path):
    proc = subprocess.Popen(["sleep", "30"])
    ident = procs.identity(proc.pid)
    path = tmp_path / "b"
    path.write_text(f"{HERE} {ident[0]} {ident[1]} {SPACE}\n")
    assert birth.died(str(path)) is None  # still running
    proc.kill()
    proc.wait()
    assert birth.died(str(path)) == (
        proc.pid,
        f"its process (pid {proc.pid}) died before it had joined MPI",
    )


def test_a_zombie_counts_as_dead_and_a_stopped_process_as_alive(tmp_path):
    proc = subprocess.Popen(["sleep", "30"])
    ident = procs.identity(proc.pid)
    try:
        proc.send_signal(19)  # SIGSTOP: stuck, not dead (the Spawn's deadline decides)
        assert procs.running(ident)
        proc.kill()
        end = time.monotonic() + 10
        while procs.running(ident) and time.monotonic() < end:  # not waited for yet: a zombie
            time.sleep(0.01)
        assert procs.state(proc.pid) == "Z" and not procs.running(ident)
    finally:
        proc.kill()
        proc.wait()


def test_the_verdict_needs_a_record_of_this_host_and_a_process_that_is_gone():
    gone, there = (lambda ident: False), (lambda ident: True)
    assert birth.verdict(None, HERE, gone) is None  # not written yet
    assert (
        birth.verdict(("other", (12, "99")), HERE, gone) is None
    )  # another host: not visible here
    assert birth.verdict((HERE, (12, "99")), HERE, there) is None
    assert (
        birth.verdict((HERE, (12, "99")), HERE, gone)
        == "its process (pid 12) died before it had joined MPI"
    )


def test_a_torn_or_missing_record_reads_as_none(tmp_path):
    assert birth.read(str(tmp_path / "none")) is None
    (tmp_path / "torn").write_text("host 12")
    assert birth.read(str(tmp_path / "torn")) is None
    (tmp_path / "bad").write_text("host twelve 99")
    assert birth.read(str(tmp_path / "bad")) is None


def test_a_record_that_cannot_be_written_is_left_out(tmp_path):
    birth.write(
        str(tmp_path / "no" / "such" / "dir")
    )  # no error: the driver falls back on its deadline


def test_the_entry_takes_its_folder_and_record_in_any_order():
    assert options(["--path", "/s", "--birth", "/t/b"]) == {"--path": "/s", "--birth": "/t/b"}
    assert options(["--birth", "/t/b", "--path", "/s"]) == {"--path": "/s", "--birth": "/t/b"}
    assert options([]) == {} and options(["--path"]) == {}


def test_before_its_record_a_replacement_is_found_by_its_command_line_and_its_death_seen(tmp_path):
    """The interpreter's first 0.1 s come before the record: the watch finds the process by
    the record's path in its arguments (a process older than the watch is never read)."""
    import sys

    path = str(tmp_path / "never-written")
    older = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", path])
    try:
        watch = birth.SpawnDeathCheck(path)
        assert watch.dead() is None and watch.seen == set()  # the older one is left out
        young = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", path])
        end = time.monotonic() + 10
        while not watch.seen and time.monotonic() < end:
            time.sleep(birth.SCAN_EVERY)
            assert watch.dead() is None
        assert watch.seen == {procs.identity(young.pid)}
        young.kill()
        young.wait()
        assert watch.dead() == (
            young.pid,
            f"its process (pid {young.pid}) died before it had joined MPI",
        )
    finally:
        older.kill()
        older.wait()


def test_once_written_the_record_decides(tmp_path):
    path = tmp_path / "b"
    watch = birth.SpawnDeathCheck(str(path))
    assert watch.dead() is None  # nothing names it yet: nothing is known
    birth.write(str(path))
    assert watch.dead() is None  # this process, running
    path.write_text(f"{HERE} 1 0 {SPACE}\n")  # pid 1 with another start time: not that process
    assert watch.dead() == (1, "its process (pid 1) died before it had joined MPI")


def test_a_process_seen_once_is_never_judged_by_its_appearance(tmp_path):
    """The appearance deadline is only for a process never seen: one seen and running, or a
    written record, decides instead however late it is."""
    path = tmp_path / "b"
    clock = [0.0]
    watch = birth.SpawnDeathCheck(str(path), here=True, clock=lambda: clock[0])
    birth.write(str(path))  # this process, running
    clock[0] += birth.APPEAR_WITHIN * 10
    assert watch.dead() is None


def test_a_process_never_seen_here_is_dead_after_its_time_and_only_where_it_starts_here(tmp_path):
    clock = [0.0]
    here = birth.SpawnDeathCheck(str(tmp_path / "x"), here=True, clock=lambda: clock[0])
    there = birth.SpawnDeathCheck(str(tmp_path / "y"), clock=lambda: clock[0])
    clock[0] = birth.APPEAR_WITHIN
    assert here.dead() is None and there.dead() is None
    clock[0] += birth.SCAN_EVERY * 2
    pid, why = here.dead()
    assert pid is None and why.startswith(
        f"its process was not seen on this host within {birth.APPEAR_WITHIN:g} s"
    )
    assert there.dead() is None  # on another host: its Spawn's deadline decides


def test_a_replacement_is_told_its_drivers_identity_and_believes_it_only_in_its_own_pid_space():
    text = birth.driver_arg()
    assert birth.parse_driver(text) == procs.identity(os.getpid())
    pid, start, _ = text.split(",")
    assert birth.parse_driver(f"{pid},{start},another-boot:1") is None  # another container or host
    assert birth.parse_driver(None) is None and birth.parse_driver("nonsense") is None
    assert options(["--birth", "b", birth.DRIVER_ARG, text])[birth.DRIVER_ARG] == text
