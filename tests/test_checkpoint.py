"""Checkpoint and resume under real MPI: the driver (or every rank) is killed or preempted,
the same command is run again, and the fit ends bit-identical to an uninterrupted one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import LIBRARIES
from mpiharness import (
    OMPI_PYTHON,
    fit_args,
    no_leftover_processes,
    run_job,
    same_fit,
    wait_for_checkpoint,
)

from mixle_mpi.chaos.fault_plan import FIRED_ENV, read_fired, unfired
from mixle_mpi.storage import checkpoint as ckpt

pytestmark = pytest.mark.mpijob

ITS = 8


def _args(model: str, n: int, ck: Path, extra=()) -> list[str]:
    return fit_args(model, n, 4, 1, ITS) + ["--checkpoint", str(ck), *extra]


def killed_job(ranks: int, args: list[str], tmp: Path, plan: str):
    """A job under fault ``plan`` whose every planned fault must fire (the victim's own record)."""
    log = tmp.parent / f"{tmp.name}-faults.jsonl"
    job = run_job(OMPI_PYTHON, ranks, args, tmp, plan=plan, env={FIRED_ENV: str(log)})
    records = read_fired(str(log))
    assert unfired(plan, records) == [], (
        f"planned faults that did not fire: {plan}\n" + job.describe()
    )
    return job


@pytest.fixture(scope="module")
def uninterrupted(uninterrupted_fit):
    assert ITS == 8  # the session's reference fit runs 8 iterations
    return uninterrupted_fit


@pytest.mark.parametrize("model,n,call", [("gmm1d", 4000, 2), ("hmm", 600, 4), ("gmm1d", 4000, 4)])
def test_driver_killed_mid_estep_resumes_exactly(model, n, call, tmp_path, uninterrupted):
    ck = tmp_path / "ck.h5"
    first = killed_job(4, _args(model, n, ck), tmp_path / "a", f"0:kill:estep_before:{call}")
    assert first.rc != 0 and first.result is None, first.describe()
    assert ckpt.read(str(ck)).iteration == call
    # resume on a different number of ranks: S is fixed by the checkpoint, so the bits are too
    second = run_job(OMPI_PYTHON, 3, _args(model, n, ck), tmp_path / "b")
    assert second.rc == 0, second.describe()
    assert same_fit(second.result, uninterrupted(model, n)), second.describe()
    assert [e["iteration"] for e in second.events if e["event"] == "resumed"] == [call]
    assert no_leftover_processes(str(tmp_path)) == []


def test_driver_killed_while_writing_a_checkpoint(tmp_path, uninterrupted):
    ck = tmp_path / "ck.h5"
    first = killed_job(4, _args("gmm1d", 4000, ck), tmp_path / "a", "0:kill:checkpoint_write:3")
    assert first.rc != 0, first.describe()
    assert ckpt.read(str(ck)).iteration == 2  # the half-written one never replaced it
    second = run_job(OMPI_PYTHON, 4, _args("gmm1d", 4000, ck), tmp_path / "b")
    assert second.rc == 0, second.describe()
    assert same_fit(second.result, uninterrupted("gmm1d", 4000))


@pytest.mark.parametrize("its", [ITS, 500], ids=["iteration-cap", "converged"])
def test_a_driver_lost_before_the_finished_checkpoint_resumes_exactly(its, tmp_path):
    """The last EM step (at the cap, or converged) gets no checkpoint of its own, only the
    finished one: a driver lost between the two leaves the step before it, which resumes
    and replays that step to the same bits. (Resumed from the last step itself, mixle's
    loop ran one step more, having no previous log-likelihood to test, or was asked for
    zero iterations and failed.) ``.prev`` after a finished fit is exactly what such a
    driver leaves on disk."""
    ck = tmp_path / "ck.h5"
    args = fit_args("gmm1d", 4000, 4, 1, its)
    whole = run_job(OMPI_PYTHON, 4, args + ["--checkpoint", str(ck)], tmp_path / "a")
    assert whole.rc == 0, whole.describe()
    done, left = ckpt.read(str(ck)), ckpt.read_file(str(ck) + ".prev")
    assert done.finished and done.iteration == whole.result["iterations"], done
    assert not left.finished and left.iteration == done.iteration - 1, left
    assert (done.stopped == "converged") == (its > done.iteration), done
    ck2 = tmp_path / "left.h5"
    ck2.write_bytes(Path(str(ck) + ".prev").read_bytes())
    again = run_job(OMPI_PYTHON, 4, args + ["--checkpoint", str(ck2)], tmp_path / "b")
    assert again.rc == 0, again.describe()
    assert [e["iteration"] for e in again.events if e["event"] == "resumed"] == [left.iteration]
    assert same_fit(again.result, whole.result), again.describe()


def _start(
    tmp_path: Path, ck: Path, n: int, python: str = OMPI_PYTHON
) -> tuple[subprocess.Popen, Path]:
    events = tmp_path / "events.jsonl"
    env = dict(
        os.environ,
        PYTHONWARNINGS="ignore",
        MIXLE_MPI_EVENT_LOG=str(events),
        MIXLE_MPI_FAULT_PLAN="",
    )
    cmd = [
        python,
        "-m",
        "mixle_mpi",
        "run",
        "-n",
        "4",
        "--timeout",
        "200",
        "--",
        python,
        "-m",
        "mixle_mpi.fitting.fitjob",
        *_args("gmm1d", n, ck),
        "--max-its",
        "40",
        "--workdir",
        str(tmp_path / "work"),
        "--quiet",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=str(tmp_path),
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, events


def _resume_and_compare(tmp_path: Path, ck: Path, n: int, python: str = OMPI_PYTHON) -> None:
    ref = run_job(OMPI_PYTHON, 4, fit_args("gmm1d", n, 4, 1, 40), tmp_path / "ref")
    again = run_job(python, 4, _args("gmm1d", n, ck) + ["--max-its", "40"], tmp_path / "again")
    assert again.rc == 0, again.describe()
    assert any(e["event"] == "resumed" for e in again.events)
    assert same_fit(again.result, ref.result)


def test_every_rank_killed_resumes_exactly(tmp_path):
    ck, n = tmp_path / "ck.h5", 200000
    proc, _ = _start(tmp_path, ck, n)
    wait_for_checkpoint(ck, 3, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    time.sleep(1.0)
    assert no_leftover_processes(str(tmp_path / "work")) == []
    _resume_and_compare(tmp_path, ck, n)


# one handler for both: SIGUSR1 (SLURM's time-limit signal) and SIGTERM
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1], ids=["SIGTERM", "SIGUSR1"])
def test_signal_to_the_driver_checkpoints_and_asks_for_requeue(sig, tmp_path):
    ck, n = tmp_path / "ck.h5", 200000
    proc, events = _start(tmp_path, ck, n)
    wait_for_checkpoint(ck, 2, proc)
    start = next(json.loads(line) for line in events.read_text().splitlines() if '"start"' in line)
    os.kill(start["driver_pid"], sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err[-4000:]
    assert f"received {sig.name}" in err and "rerun the same command to resume" in err
    # a planned stop is a checkpoint and a requeue, said once: not a failure, no worker exit lines
    assert (
        "driver failed" not in err
        and "exiting with code" not in err
        and "driver reported" not in err
    ), err
    assert len([ln for ln in err.splitlines() if "rerun the same command to resume" in ln]) == 1, (
        err
    )
    saved = ckpt.read(str(ck))
    assert not saved.finished and saved.iteration >= 2
    _resume_and_compare(tmp_path, ck, n)


@pytest.mark.parametrize("lib", LIBRARIES)
def test_a_time_limit_signal_to_the_launcher_checkpoints_the_driver_under_either_mpi(lib, tmp_path):
    """SLURM's USR1 reaches `mixle-mpi run` (the batch shell passes it on): the launcher
    forwards it to the driver alone, which checkpoints and exits 75. Under MPICH every rank
    ignores USR1 (Hydra sends it at any rank's death), so the launcher sends SIGTERM, which
    means the same to the driver. The rerun resumes to the same bits."""
    _, python = lib
    ck, n = tmp_path / "ck.h5", 200000
    proc, _ = _start(tmp_path, ck, n, python)
    wait_for_checkpoint(ck, 2, proc)
    os.kill(proc.pid, signal.SIGUSR1)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err[-4000:]
    assert "received SIGUSR1: passed it to the driver" in err, err[-4000:]
    saved = ckpt.read(str(ck))
    assert not saved.finished and saved.iteration >= 2
    _resume_and_compare(tmp_path, ck, n, python)


@pytest.fixture(scope="module")
def killed_checkpoint(tmp_path_factory):
    """The checkpoint of a fit whose driver was killed at iteration 2 (made once per module)."""
    tmp = tmp_path_factory.mktemp("killed")
    ck = tmp / "ck.h5"
    first = killed_job(3, _args("gmm1d", 3000, ck), tmp / "a", "0:kill:estep_before:2")
    assert first.rc != 0 and ck.exists(), first.describe()
    return ck


@pytest.mark.parametrize(
    "change,field",
    [
        (["--data-seed", "2"], "fingerprint.data"),
        (["--sub-chunks", "2"], "layout.sub_chunks"),
        (["--num-shards", "3"], "layout.num_shards"),
        (["--seed", "8"], "fingerprint.config"),
    ],
)
def test_checkpoint_of_another_fit_is_refused(change, field, tmp_path, killed_checkpoint):
    ck = tmp_path / "ck.h5"
    ck.write_bytes(killed_checkpoint.read_bytes())  # each case gets the same checkpoint, untouched
    again = run_job(OMPI_PYTHON, 3, _args("gmm1d", 3000, ck) + change, tmp_path / "b")
    assert again.rc == 2, again.describe()
    assert "is a checkpoint of a different fit" in again.stderr and field in again.stderr, (
        again.describe()
    )


def test_corrupt_checkpoint_falls_back_or_fails_clearly(tmp_path, uninterrupted):
    ck = tmp_path / "ck.h5"
    first = killed_job(4, _args("gmm1d", 4000, ck), tmp_path / "a", "0:kill:estep_before:5")
    assert first.rc != 0
    assert ckpt.read_file(str(ck)).iteration == 5
    prev_iteration = ckpt.read_file(
        str(ck) + ".prev"
    ).iteration  # the good one left to fall back to
    assert 1 <= prev_iteration < 5
    data = bytearray(ck.read_bytes())
    i = data.find(b'"iteration"')
    assert i >= 0, "the byte to flip was not found: the checkpoint was not corrupted"
    assert data.find(b'"iteration"', i + 1) == -1  # one copy only: flipping it leaves no good one
    data[i + 1] ^= 0x01
    ck.write_bytes(bytes(data))
    assert b'"iteration"' not in ck.read_bytes()  # the flip really landed in the file
    with pytest.raises(ckpt.CheckpointError, match="checksum mismatch"):
        ckpt.read_file(str(ck))
    again = run_job(OMPI_PYTHON, 4, _args("gmm1d", 4000, ck), tmp_path / "b")
    assert again.rc == 0, again.describe()
    fallback = [e for e in again.events if e["event"] == "checkpoint_fallback"]
    assert len(fallback) == 1 and "checksum mismatch" in str(fallback[0]), again.describe()
    (resumed,) = [e for e in again.events if e["event"] == "resumed"]
    assert resumed["iteration"] == prev_iteration and resumed["source"] == f"{ck}.prev", resumed
    assert "checksum mismatch" in resumed["fallback"]
    line = f"resumed {ck} after iteration {prev_iteration}; read {ck}.prev instead, because {ck} is damaged"
    assert line in again.stderr, again.describe()  # the fallback is said in the resumed line
    assert same_fit(again.result, uninterrupted("gmm1d", 4000))
    # now both files are bad: a clear error naming them, exit 2
    for p in (ck, Path(str(ck) + ".prev")):
        p.write_bytes(b"garbage")
    bad = run_job(OMPI_PYTHON, 3, _args("gmm1d", 4000, ck), tmp_path / "c")
    assert bad.rc == 2 and "no usable checkpoint" in bad.stderr and str(ck) in bad.stderr, (
        bad.describe()
    )


def test_missing_checkpoint_directory_fails_before_work(tmp_path):
    ck = tmp_path / "missing" / "ck.h5"
    job = run_job(OMPI_PYTHON, 3, _args("gmm1d", 3000, ck), tmp_path / "a")
    assert job.rc == 2, job.describe()
    assert "does not exist" in job.stderr
    assert not any(e["event"] == "start" for e in job.events)


def test_driver_killed_mid_fold_recomputes_only_missing_shards(tmp_path, uninterrupted):
    """With the fold journal, the round's shards that had arrived are not recomputed."""
    ck = tmp_path / "ck.h5"
    first = killed_job(
        4, _args("gmm1d", 4000, ck, ["--fold-journal"]), tmp_path / "a", "0:kill:estep_mid:3"
    )
    assert first.rc != 0, first.describe()
    second = run_job(OMPI_PYTHON, 4, _args("gmm1d", 4000, ck, ["--fold-journal"]), tmp_path / "b")
    assert second.rc == 0, second.describe()
    reused = [e["shards"] for e in second.events if e["event"] == "journal_reused"]
    assert len(reused) == 1 and 1 <= len(reused[0]) < 4, second.describe()
    first_round = [r for r in second.result["rounds"] if r["kind"] == "estep"][0]
    assert first_round["journaled"] == reused[0]
    assert sorted(first_round["reused"] + first_round["journaled"]) == [0, 1, 2, 3]
    assert same_fit(second.result, uninterrupted("gmm1d", 4000))


@pytest.mark.parametrize(
    "library", LIBRARIES
)  # Open MPI's ULFM reports the death anyway: the pid check is MPICH's
def test_workers_see_a_dead_driver_on_their_host_at_once(library, tmp_path):
    """A SIGKILLed driver is noticed by the workers on its host within a few heartbeats (its
    pid is gone), not after driver_timeout (60 s here): the job ends quickly with the
    checkpoint saved, for a rerun to resume."""
    _, python = library
    ck = tmp_path / "ck.h5"
    log = tmp_path / "faults.jsonl"
    plan = "0:kill:estep_before:3"
    t0 = time.monotonic()
    job = run_job(
        python,
        4,
        _args("gmm1d", 4000, ck),
        tmp_path / "a",
        plan=plan,
        env={FIRED_ENV: str(log), "MIXLE_MPI_DRIVER_TIMEOUT": "60"},
    )
    seconds = time.monotonic() - t0
    assert unfired(plan, read_fired(str(log))) == [], job.describe()
    assert job.rc != 0 and ckpt.read(str(ck)).iteration == 3, job.describe()
    assert seconds < 50, (
        f"the job took {seconds:.0f} s to end after the driver died\n" + job.describe()
    )
    if "mpich" in python:  # no ULFM there: the workers' own check of the driver's pid ended them
        assert "the driver process (pid" in job.stderr and "is gone" in job.stderr, job.describe()
    assert no_leftover_processes(str(tmp_path)) == []
