"""The job's private run folder (core/rundir.py) and the files in it, tried as another local
user would: a folder or a record planted, linked or opened up is never believed."""

from __future__ import annotations

import os
import socket

import pytest

from mixle_mpi.core import procs, rundir
from mixle_mpi.runtime import birth

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")


def test_a_folder_is_trusted_only_if_it_is_this_users_own_and_closed(tmp_path):
    good = tmp_path / "run"
    good.mkdir(mode=0o700)
    assert rundir.problem(str(good)) is None
    opened = tmp_path / "open"
    opened.mkdir()
    opened.chmod(0o777)
    assert "others can enter it" in rundir.problem(str(opened))
    link = tmp_path / "link"
    link.symlink_to(good)
    assert rundir.problem(str(link)) == "it is a symbolic link"
    (tmp_path / "file").write_text("x")
    assert rundir.problem(str(tmp_path / "file")) == "it is not a folder"
    assert "cannot see it" in rundir.problem(str(tmp_path / "missing"))


@as_root
def test_a_folder_of_another_user_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    assert f"belongs to uid {NOBODY}" in rundir.problem(str(theirs))


def test_the_launchers_folder_is_used_only_if_it_can_be_trusted(tmp_path, monkeypatch):
    good = tmp_path / "run"
    good.mkdir(mode=0o700)
    monkeypatch.setenv(rundir.RUN_DIR_ENV, str(good))
    assert rundir.own() == str(good)
    bad = tmp_path / "open"
    bad.mkdir()
    bad.chmod(0o755)
    monkeypatch.setenv(rundir.RUN_DIR_ENV, str(bad))
    made = rundir.own()  # one of this process's own instead, private and unpredictable
    assert (
        made != str(bad)
        and rundir.problem(made) is None
        and os.path.basename(made).startswith("mixle_mpi_run_")
    )
    assert rundir.own() == made


def test_new_files_never_replace_or_follow_and_only_own_regular_files_are_read(tmp_path):
    path = tmp_path / "record"
    rundir.create_new(str(path), "hello")
    assert rundir.read_trusted(str(path)) == "hello"
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    with pytest.raises(FileExistsError):
        rundir.create_new(str(path), "again")
    target = tmp_path / "target"
    target.write_text("secret")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(OSError):
        rundir.create_new(str(link), "through the link")
    assert target.read_text() == "secret"
    assert rundir.read_trusted(str(link)) is None
    assert rundir.read_trusted(str(tmp_path)) is None  # a folder is no record
    assert rundir.read_trusted(str(tmp_path / "missing")) is None


@as_root
def test_a_birth_record_planted_by_another_user_names_no_process(tmp_path):
    """The attack of issue 33: a record that names a process of the planter's choosing. Even
    inside the run folder (which another user cannot enter), a record not of this user is
    not read, so the driver never takes that process for its replacement nor signals it."""
    ident = procs.identity(os.getpid())
    path = tmp_path / "birth_2_0_planted"
    path.write_text(f"{socket.gethostname()} {ident[0]} {ident[1]} {procs.pid_space()}\n")
    assert birth.read(str(path)) is not None  # this user's own: believed
    os.chown(path, NOBODY, NOBODY)
    assert (
        birth.read(str(path)) is None
        and birth.identity_here(str(path)) is None
        and birth.died(str(path)) is None
    )


def test_a_record_from_another_pid_space_names_no_process_here(tmp_path):
    """Two containers may share a host name, never a pid space: a pid from another one is
    never looked at here (nor signalled)."""
    ident = procs.identity(os.getpid())
    path = tmp_path / "b"
    path.write_text(f"{socket.gethostname()} {ident[0]} {ident[1]} another-boot:4026531836\n")
    assert birth.read(str(path)) == ("", ident)
    assert birth.identity_here(str(path)) is None


def test_pid_space_is_this_kernels_boot_and_pid_namespace():
    space = procs.pid_space()
    assert space and space == procs.pid_space() and space.count(":") == 1
    assert procs.pid_space("/nonexistent") == ""


def test_a_signal_reaches_only_the_process_that_was_named(tmp_path):
    """``procs.kill_same``: a pid reused by another process is refused, a gone one is None."""
    import signal
    import subprocess

    from mixle_mpi.core import procs

    proc = subprocess.Popen(["sleep", "30"])
    ident = procs.identity(proc.pid)
    assert (
        procs.kill_same((proc.pid, "1"), signal.SIGKILL) is False
    )  # another start time: another process
    assert proc.poll() is None  # untouched
    assert procs.kill_same(ident, signal.SIGKILL) is True
    proc.wait()
    assert procs.kill_same(ident, signal.SIGKILL) is None


def test_the_launchers_files_are_written_only_into_a_trusted_run_folder(tmp_path):
    """A rank on another host than the launcher's cannot see the launcher's folder (the
    README's cross-host recipe crashed at MPI init, and a failover successor when the fit
    began): it says so once and goes on. A folder others can enter is never written into."""
    good = tmp_path / "run"
    good.mkdir(mode=0o700)
    assert rundir.write_marker(str(good / "status.json"), {"exit_code": 0})
    assert (good / "status.json").read_text() == '{"exit_code": 0}\n'
    assert rundir.append_line(str(good / "init_begun.txt"), "1 0 h\n") and rundir.append_line(
        str(good / "init_begun.txt"), "2 1 h\n"
    )
    assert (good / "init_begun.txt").read_text() == "1 0 h\n2 1 h\n"
    assert not rundir.write_marker(
        str(tmp_path / "elsewhere" / "status.json"), {"exit_code": 0}
    )  # another host's
    assert not rundir.append_line(str(tmp_path / "elsewhere" / "init_begun.txt"), "x\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert (
        not rundir.write_marker(str(shared / "driver.json"), {"pid": 1})
        and not (shared / "driver.json").exists()
    )
    assert not rundir.write_marker(None, {}) and not rundir.append_line("", "x\n")
