"""Temporary files are removed on every path: a launcher SIGKILLed mid-job (its reaper
removes the run folder), and the hostfiles a relaunch without a lost host writes. Real
processes: the launcher, its reaper and a stand-in mpiexec that only waits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

from mixle_mpi.launch import host_plan, hostlist, hostprobe
from mixle_mpi.launch.hostrelaunch import HostRelaunch

FAKE_MPIEXEC = """#!/bin/sh
case " $* " in *" --version "*) echo "HYDRA build details: mpich"; exit 0;; esac
exec sleep 60
"""


def _left(folder) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith("mixle_mpi_"))


def _within(seconds: float, done) -> bool:
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(0.1)
    return done()


def test_a_killed_launchers_run_folder_is_removed_by_its_reaper(tmp_path):
    """Before, a SIGKILLed launcher left its run folder (mkdtemp, in $TMPDIR) behind."""
    mpiexec, tmp = tmp_path / "mpiexec", tmp_path / "tmp"
    mpiexec.write_text(FAKE_MPIEXEC)
    mpiexec.chmod(0o755)
    tmp.mkdir()
    launcher = subprocess.Popen(
        [sys.executable, "-m", "mixle_mpi", "run", "--mpiexec", str(mpiexec), "-n", "2", "--"]
        + ["true"],
        env={**os.environ, "TMPDIR": str(tmp)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert _within(30, lambda: _left(tmp)), "the launch never made its run folder"
    finally:
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
    assert _within(15, lambda: not _left(tmp)), _left(tmp)


def test_a_relaunchs_hostfiles_are_removed_when_it_closes(tmp_path, monkeypatch):
    """Before, each relaunch without a lost host wrote a hostfile (mkstemp in $TMPDIR) that
    nothing removed."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    hostfile = tmp_path / "hosts.txt"
    hostfile.write_text("a slots=2\nb slots=2\n")
    hosts = hostlist.Hosts((("a", 2), ("b", 2)), "hostfile")
    answers = {"a": hostprobe.Answer(True, "ok"), "b": hostprobe.Answer(False, "lost")}
    monkeypatch.setattr(hostprobe, "probe", lambda *a, **k: answers)
    monkeypatch.setattr(hostprobe, "missing_folder", lambda *a: None)
    relaunch = HostRelaunch(
        "mpiexec",
        "openmpi",
        4,
        ["--hostfile", str(hostfile)],
        hosts,
        host_plan.HostBook(2, 600.0, 2),
        {},
    )
    failed = SimpleNamespace(code=1, timed_out=False, ended_at=time.time())
    assert relaunch.after(failed, 2) is True
    written = relaunch.extra[relaunch.extra.index("--hostfile") + 1]
    assert open(written).read() == "a slots=2\n"
    relaunch.close()
    assert not os.path.exists(written) and _left(tmp_path) == []
