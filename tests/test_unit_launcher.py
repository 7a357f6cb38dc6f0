"""Launcher pure functions: the mpiexec command line, the environment, the verdict."""

from __future__ import annotations

import os

import pytest

from mixle_mpi.core import exitcodes
from mixle_mpi.core.errors import ConfigError
from mixle_mpi.launch import launcher
from mixle_mpi.launch.launcher import (
    MANY_RANKS_ENV,
    MPICH,
    OPENMPI,
    build_command,
    judge,
    launch_env,
    too_many_ranks,
    verdict_level,
    wrapper_path,
)

CMD = ["python", "-m", "mixle_mpi.fitjob", "--model", "gmm1d"]


@pytest.fixture
def as_user(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)


@pytest.fixture
def as_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)


def test_openmpi_command_as_user(as_user):
    argv = build_command("/opt/bin/mpiexec", OPENMPI, 3, CMD)
    assert argv[0] == "/opt/bin/mpiexec"
    i = argv.index("--with-ft")
    assert argv[i + 1] == "ulfm"
    assert "--oversubscribe" in argv
    assert "--allow-run-as-root" not in argv
    n = argv.index("-n")
    assert argv[n + 1] == "3"
    assert argv[n + 2 :] == CMD  # the command comes last, unchanged
    assert all(flag in argv[:n] for flag in ("--with-ft", "ulfm", "--oversubscribe"))


def test_openmpi_command_as_root(as_root):
    argv = build_command("mpiexec", OPENMPI, 2, CMD)
    assert "--allow-run-as-root" in argv
    assert argv.index("--allow-run-as-root") < argv.index("-n")
    assert argv[argv.index("-n") + 1] == "2"
    assert argv[-len(CMD) :] == CMD


def test_openmpi_extra_before_n(as_user):
    argv = build_command("mpiexec", OPENMPI, 4, CMD, extra=["--mca", "btl", "self,tcp"])
    n = argv.index("-n")
    assert argv[n - 3 : n] == ["--mca", "btl", "self,tcp"]
    assert argv[n + 1] == "4"
    assert argv[n + 2 :] == CMD


def test_mpich_command(as_root):
    argv = build_command("/usr/bin/mpiexec", MPICH, 5, CMD)
    assert argv[0] == "/usr/bin/mpiexec"
    assert "-disable-auto-cleanup" in argv
    assert "--with-ft" not in argv and "--allow-run-as-root" not in argv
    n = argv.index("-n")
    assert argv[n + 1] == "5"
    assert argv[n + 2] == "sh"
    assert argv[n + 3] == wrapper_path()
    assert argv[n + 4 :] == CMD  # wrapper first, then the command


def test_mpich_extra_before_n():
    argv = build_command("mpiexec", MPICH, 2, CMD, extra=["-hosts", "a,b"])
    n = argv.index("-n")
    assert argv[1] == "-disable-auto-cleanup"
    assert argv[n - 2 : n] == ["-hosts", "a,b"]


def test_wrapper_file_exists():
    path = wrapper_path()
    assert os.path.isfile(path)
    assert os.path.basename(path) == "rankwrap.sh"
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    assert text.startswith("#!/bin/sh")
    assert "trap '' USR1" in text


@pytest.mark.parametrize("flavor", [OPENMPI, MPICH])
@pytest.mark.parametrize("n", [1, 0, -3])
def test_too_few_ranks(flavor, n):
    with pytest.raises(ConfigError, match=f"found -n {n} but needs at least 2"):
        build_command("mpiexec", flavor, n, CMD)


@pytest.mark.parametrize("flavor", [OPENMPI, MPICH])
def test_empty_command(flavor):
    with pytest.raises(ConfigError, match="no command given"):
        build_command("mpiexec", flavor, 3, [])


def test_unknown_flavor():
    with pytest.raises(ConfigError) as exc:
        build_command("mpiexec", "intelmpi", 3, CMD)
    msg = str(exc.value)
    assert "'intelmpi'" in msg and "'openmpi'" in msg and "'mpich'" in msg


def test_build_command_does_not_mutate_inputs(as_user):
    cmd, extra = list(CMD), ["--x"]
    build_command("mpiexec", OPENMPI, 3, cmd, extra)
    build_command("mpiexec", MPICH, 3, cmd, extra)
    assert cmd == CMD and extra == ["--x"]


# -- judge ---------------------------------------------------------------------------------
def test_judge_status_ok_overrides_nonzero_mpiexec():
    code, note = judge(141, {"status": "ok", "exit_code": 0, "message": "fit done"})
    assert code == 0
    assert "ok" in note and "fit done" in note
    assert "141" in note and "ignored" in note


def test_judge_status_ok_mpiexec_zero():
    code, note = judge(0, {"status": "ok", "exit_code": 0, "message": ""})
    assert code == 0
    assert "ignored" not in note


def test_judge_status_ok_after_timeout():
    code, note = judge(None, {"status": "ok", "exit_code": 0})
    assert code == 0 and "ignored" not in note


@pytest.mark.parametrize("rc", [0, 1, 255, None])
@pytest.mark.parametrize(
    "reported", [exitcodes.BAD_INPUT, exitcodes.FAILED, exitcodes.RECONFIG_TIMEOUT]
)
def test_judge_status_error_uses_its_code(rc, reported):
    code, note = judge(
        rc, {"status": "error", "exit_code": reported, "message": "NoWorkersLeft: all dead"}
    )
    assert code == reported
    assert "error" in note and "NoWorkersLeft" in note
    assert "ignored" not in note


def test_judge_a_ranks_early_verdict_names_the_rank_and_is_no_failed_start():
    """A worker's own error before the handle existed (exiting._early_verdict): its code,
    its rank named, and no "never started" (which the launcher would launch again)."""
    status = {"status": "error", "exit_code": 1, "message": "rank 3 failed: E", "by": "rank 3"}
    code, note = judge(1, status, never_started="the ranks died while the job started")
    assert code == exitcodes.FAILED
    assert note.startswith("rank 3 reported error (exit 1)") and "never started" not in note


def test_judge_status_without_exit_code_is_failure():
    code, _ = judge(0, {"status": "weird"})
    assert code == exitcodes.FAILED


def test_judge_status_exit_code_as_string():
    assert judge(0, {"status": "error", "exit_code": "2"})[0] == 2


def test_judge_no_status_rc_zero_is_failure():
    code, note = judge(0, None)
    assert code == exitcodes.FAILED == 1
    assert "no status" in note


@pytest.mark.parametrize("rc", [137, 1, 2, 255])
def test_judge_no_status_nonzero_passes_rc_through(rc):
    code, note = judge(rc, None)
    assert code == rc
    assert str(rc) in note and "no status" in note


def test_judge_timeout_without_status():
    code, note = judge(None, None)
    assert code == exitcodes.FAILED == 1
    assert "timed out" in note


def test_verdict_is_not_repeated_when_the_driver_printed_it():
    import logging

    said = {
        "status": "error",
        "exit_code": 2,
        "message": "DataError: bad.csv line 3",
        "reported": True,
    }
    assert verdict_level(2, said) == logging.DEBUG  # shown with -v only
    assert verdict_level(2, {**said, "reported": False}) == logging.ERROR
    assert verdict_level(1, None) == logging.ERROR  # no status: the launcher's own finding
    assert verdict_level(0, {"status": "ok", "exit_code": 0}) == logging.DEBUG
    assert verdict_level(75, None) == logging.WARNING
    assert (
        verdict_level(130, {**said, "exit_code": 130}) == logging.DEBUG
    )  # the driver's own Ctrl-C line
    assert (
        verdict_level(130, {**said, "exit_code": 75}) == logging.WARNING
    )  # the launcher's word differs


# -- too many ranks ---------------------------------------------------------------------------
def test_far_more_ranks_than_cores_is_refused_with_how_to_allow_it():
    why = too_many_ranks(300, 2, environ={})
    assert "found -n 300 but this machine has 2 core(s)" in why
    assert "--allow-many-ranks" in why and f"{MANY_RANKS_ENV}=1" in why
    assert too_many_ranks(300, 2, allowed=True, environ={}) is None
    assert too_many_ranks(300, 2, environ={MANY_RANKS_ENV: "yes"}) is None
    assert (
        too_many_ranks(300, 2, environ={"SLURM_JOB_ID": "17"}) is None
    )  # the allocation places them


@pytest.mark.parametrize(
    "n, cores, refused",
    [(8, 1, False), (9, 1, True), (8, 2, False), (9, 2, True), (64, 16, False), (65, 16, True)],
)
def test_limit_is_four_ranks_per_core_but_never_below_eight(n, cores, refused):
    assert (too_many_ranks(n, cores, environ={}) is not None) == refused


def test_the_launcher_refuses_before_starting_anything(monkeypatch):
    monkeypatch.delenv(MANY_RANKS_ENV, raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setattr(launcher, "usable_cores", lambda: 2)
    monkeypatch.setattr(launcher, "detect_flavor", lambda exe: OPENMPI)
    monkeypatch.setattr(launcher, "_launch_once", lambda *a: pytest.fail("a job was launched"))
    with pytest.raises(ConfigError, match="found -n 300"):
        launcher.run(300, ["python", "x.py"], mpiexec="/bin/true")


# -- launch_env --------------------------------------------------------------------------------
BLAS_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def test_launch_env_sets_blas_and_status():
    env = launch_env(3, {"MIXLE_MPI_STATUS_FILE": "/tmp/status.json"}, base={"PATH": "/bin"})
    for var in BLAS_VARS:
        assert env[var] == "3"
    assert env["MIXLE_MPI_BLAS_THREADS"] == "3"
    assert env["MIXLE_MPI_STATUS_FILE"] == "/tmp/status.json"
    assert env["PATH"] == "/bin"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["OMPI_ALLOW_RUN_AS_ROOT"] == "1" and env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"


def test_launch_env_keeps_existing_values_but_not_status_file():
    base = {
        "OMP_NUM_THREADS": "8",
        "MKL_NUM_THREADS": "2",
        "MIXLE_MPI_BLAS_THREADS": "5",
        "MIXLE_MPI_STATUS_FILE": "/old/status.json",
        "PYTHONUNBUFFERED": "0",
    }
    snapshot = dict(base)
    env = launch_env(1, {"MIXLE_MPI_STATUS_FILE": "/new/status.json"}, base=base)
    assert env["OMP_NUM_THREADS"] == "8"
    assert env["MKL_NUM_THREADS"] == "2"
    assert env["OPENBLAS_NUM_THREADS"] == "1"  # the one not set is filled in
    assert env["MIXLE_MPI_BLAS_THREADS"] == "5"
    assert env["PYTHONUNBUFFERED"] == "0"
    assert env["MIXLE_MPI_STATUS_FILE"] == "/new/status.json"  # always this run's own file
    assert base == snapshot  # the base mapping is copied, not modified


def test_launch_env_defaults_to_os_environ(monkeypatch):
    monkeypatch.setenv("MIXLE_UNIT_MARKER", "yes")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.delenv("MIXLE_MPI_STATUS_FILE", raising=False)
    env = launch_env(2, {"MIXLE_MPI_STATUS_FILE": "/s.json"})
    assert env["MIXLE_UNIT_MARKER"] == "yes"
    assert env["OPENBLAS_NUM_THREADS"] == "2"
    assert env["MIXLE_MPI_STATUS_FILE"] == "/s.json"
    assert "MIXLE_MPI_STATUS_FILE" not in os.environ  # our own environment is left alone
    assert "OPENBLAS_NUM_THREADS" not in os.environ


def test_find_mpiexec_explicit():
    assert launcher.find_mpiexec("/some/mpiexec") == "/some/mpiexec"


def test_rank_wrapper_keeps_the_rank_stderr_but_not_its_own_killed_report():
    """A SIGKILLed worker (chaos, or the driver's fence) is logged by the driver; the shell's
    bare "Killed" line in the middle of the log is noise."""
    import subprocess
    import sys

    victim = "import os, sys; sys.stderr.write('rank says\\n'); sys.stderr.flush(); os.kill(os.getpid(), 9)"
    proc = subprocess.run(
        ["sh", wrapper_path(), "--worker", sys.executable, "-c", victim],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0  # a worker killed by a signal does not end Hydra's job
    assert proc.stderr == "rank says\n"
    driver = subprocess.run(
        ["sh", wrapper_path(), sys.executable, "-c", "import sys; sys.exit(2)"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PMI_RANK": "0"},
    )
    assert driver.returncode == 2  # the driver's own code passes through


@pytest.mark.parametrize(
    "extra, environ, here",
    [
        ([], {}, True),
        (None, {"SLURM_JOB_NUM_NODES": "1"}, True),
        (["--host", "a,b"], {}, False),
        (["--hostfile=hosts"], {}, False),
        ([], {"SLURM_JOB_NUM_NODES": "2"}, False),
        ([], {"SLURM_NNODES": "x"}, False),
        ([], {"PBS_NODEFILE": "/var/spool/nodes"}, False),
    ],
)
def test_a_launch_is_one_host_only_with_no_hosts_named_and_no_multi_node_allocation(
    extra, environ, here
):
    assert launcher.one_host(extra, environ) is here


def test_one_host_launch_leaves_out_the_between_host_transports():
    assert launcher.one_host_transports([], {}) == {"OMPI_MCA_btl": launcher.ONE_HOST_BTL}
    assert launcher.one_host_transports(None, {"SLURM_JOB_NUM_NODES": "1"}) == {
        "OMPI_MCA_btl": launcher.ONE_HOST_BTL
    }


@pytest.mark.parametrize(
    "extra, environ",
    [
        ([], {"OMPI_MCA_btl": "self,sm"}),  # the user chose
        (["--mca", "btl", "^tcp"], {}),
        (["--hostfile", "hosts.txt"], {}),  # other hosts named
        (["--host=a,b"], {}),
        (["-H", "a:2,b:2"], {}),
        ([], {"SLURM_JOB_NUM_NODES": "4"}),  # a multi-node allocation
        ([], {"SLURM_NNODES": "2"}),
        ([], {"PBS_NODEFILE": "/var/spool/pbs/aux/1"}),
    ],
)
def test_transports_are_left_alone_off_one_host_or_when_chosen(extra, environ):
    assert launcher.one_host_transports(extra, environ) == {}


def test_exit_watch_sleeps_until_the_child_ends_and_gives_its_code():
    import subprocess
    import sys
    import time

    from mixle_mpi.launch.launcher import ChildExitWait

    for use_pidfd in (True, False):
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(0.3); raise SystemExit(7)"]
        )
        with ChildExitWait(child) as exited:
            if not use_pidfd:  # the fallback where Linux has no pidfd: Popen.wait(timeout)
                os.close(exited.fd)
                exited.fd = None
            assert exited.within(0.01) is None  # still running
            t0 = time.monotonic()
            rc = None
            while rc is None and time.monotonic() - t0 < 30:
                rc = exited.within(1.0)
            assert rc == 7
        assert child.returncode == 7


def test_open_mpi_is_told_to_pass_on_every_variable_the_bits_depend_on():
    """Open MPI's mpirun hands the ranks of other hosts only the variables named with -x: a
    rank there without the baseline computed other bits and was refused (fake hosts)."""
    from mixle_mpi.launch.launcher import MPICH, OPENMPI, forwarded, launch_env

    env = launch_env(1, base={"OPENBLAS_CORETYPE": "Haswell", "MIXLE_MPI_NUMERICS": "baseline"})
    argv = forwarded(["mpiexec", "-n", "4", "python", "job.py"], OPENMPI, env)
    named = {argv[i + 1] for i, a in enumerate(argv) if a == "-x"}
    assert argv[0] == "mpiexec" and argv[-4:] == ["-n", "4", "python", "job.py"]
    assert {"OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES", "NUMBA_CPU_NAME"} <= named
    assert {"OMP_NUM_THREADS", "MIXLE_MPI_NUMERICS", "MIXLE_MPI_NUMERIC_BASELINE"} <= named
    assert forwarded(["mpiexec", "-n", "4", "x"], MPICH, env) == ["mpiexec", "-n", "4", "x"]
