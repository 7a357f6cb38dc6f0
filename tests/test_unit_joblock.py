"""One job per folder (core/joblock.py): a second job is refused naming the first, a dead
job's lock is taken over. Real processes hold the locks: fcntl locks are per process."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from mixle_mpi.core import joblock
from mixle_mpi.core.errors import ConfigError

HOLD = (
    "import sys, time; from mixle_mpi.core import joblock; joblock.hold(sys.argv[1], 'output'); "
    "print('held', flush=True); time.sleep(60)"
)


@pytest.fixture(autouse=True)
def _release():
    yield
    joblock.release_all()


def _holder(folder):
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_job_is_refused_naming_the_first_and_a_dead_ones_lock_is_taken_over(tmp_path):
    other = _holder(tmp_path)
    try:
        with pytest.raises(joblock.FolderBusy) as exc:
            joblock.hold(str(tmp_path), "output")
        text = str(exc.value)
        assert (
            f"pid {other.pid}" in text and "in use by another job" in text and "--out-dir" in text
        )
        assert isinstance(exc.value, ConfigError)  # exit 2, bad configuration
    finally:
        other.kill()
        other.wait()
        other.stdout.close()
    note = joblock.hold(str(tmp_path), "output")
    assert note is not None and f"pid {other.pid}" in note and "has ended" in note
    assert joblock.hold(str(tmp_path), "output") is None  # this process holds it already


def test_a_fresh_folder_is_taken_quietly_and_a_link_as_lock_file_is_refused(tmp_path):
    assert joblock.hold(str(tmp_path / "."), "work") is None
    joblock.release_all()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("not a lock")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / joblock.LOCK_NAME).symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="cannot lock the work folder"):
        joblock.hold(str(linked), "work")
    assert elsewhere.read_text() == "not a lock"


def test_describe_names_host_pid_and_start():
    t = time.mktime((2026, 12, 4, 17, 10, 2, 0, 0, -1))
    assert (
        joblock.describe({"host": "vm", "pid": 12, "time": t})
        == "host vm, pid 12, started 2026-12-04 17:10:02"
    )
    assert joblock.describe(None) == "host and pid unknown"


def test_the_launchers_check_refuses_a_held_folder_and_leaves_a_free_one_free(tmp_path):
    joblock.check_free(str(tmp_path), "output")  # no lock file at all
    other = _holder(tmp_path)
    try:
        with pytest.raises(joblock.FolderBusy, match=f"pid {other.pid}"):
            joblock.check_free(str(tmp_path), "output")
    finally:
        other.kill()
        other.wait()
        other.stdout.close()
    joblock.check_free(str(tmp_path), "output")  # the holder is gone
    assert joblock.hold(str(tmp_path), "output") is not None  # and the check held nothing
