"""Driver failover under real MPI: the driver (rank 0) is SIGKILLed, by a fault plan or from
outside; with failover on, the lowest surviving rank takes over in the same job, resumes
from the checkpoint and ends with the bits of a failure-free run. Under Open MPI the
survivors agree by ULFM's Shrink, under MPICH by messages (a different path: both in CI)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import LIBRARIES, with_libraries
from mpiharness import (
    OMPI_PYTHON,
    fit_args,
    no_leftover_processes,
    run_job,
    same_fit,
    wait_for_checkpoint,
)

from mixle_mpi.chaos.fault_plan import FIRED_ENV, read_fired, unfired
from mixle_mpi.storage.events import read_events

pytestmark = pytest.mark.mpijob

ITS = 8
FAILOVER = {"MIXLE_MPI_FAILOVER": "1"}


@pytest.fixture(scope="module")
def uninterrupted(uninterrupted_fit):
    assert ITS == 8  # the session's reference fit runs 8 iterations
    return uninterrupted_fit("gmm1d", 4000)


def _followed(python: str, ranks: int, plan: str, tmp: Path, extra=(), env: dict | None = None):
    """A job with failover on under fault ``plan``, whose every planned fault fired."""
    log = tmp.parent / f"{tmp.name}-faults.jsonl"
    args = fit_args("gmm1d", 4000, 4, 1, ITS) + ["--checkpoint", str(tmp / "ck.h5"), *extra]
    job = run_job(
        python, ranks, args, tmp, plan=plan, env={**FAILOVER, FIRED_ENV: str(log), **(env or {})}
    )
    assert unfired(plan, read_fired(str(log))) == [], (
        f"planned faults that did not fire: {plan}\n" + job.describe()
    )
    return job


def _events(job, name: str) -> list[dict]:
    return [e for e in job.events if e["event"] == name]


# E-step call k (from 0) follows checkpoint k; mid-fold, the driver's hook needs the fold journal;
# checkpoint_write: between the temp file and the rename; llsum: before a log-density round goes out
# (log-density call 5 comes after checkpoint 3, as measured on both MPIs)
PHASES = [
    ("0:kill:estep_before:3", (), 3),
    ("0:kill:estep_mid:4", ("--fold-journal",), 4),
    ("0:kill:checkpoint_write:5", (), 4),
    ("0:kill:llsum:5", (), 3),
]


@pytest.mark.parametrize(
    "library, plan, extra, resumed",
    [
        pytest.param(lib.values[0], *row, marks=lib.marks, id=f"{row[0].split(':')[2]}-{lib.id}")
        for row in PHASES
        for lib in LIBRARIES
    ],
)
def test_a_dead_driver_is_followed_to_the_same_bits(
    library, plan, extra, resumed, tmp_path, uninterrupted
):
    job = _followed(library[1], 4, plan, tmp_path / "job", extra)
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, uninterrupted), job.describe()
    (failed,), (elected,) = _events(job, "driver_failed"), _events(job, "driver_elected")
    assert elected["rank"] == 1 and elected["survivors"] == 3 and elected["pid"] != failed["pid"], (
        elected
    )
    assert elected["time"] - failed["seen_at"] < 10, (failed, elected)
    assert [e["iteration"] for e in _events(job, "resumed")] == [resumed]
    assert [e["workers"] for e in _events(job, "failover_armed")] == [[1, 2, 3], [1, 2]], (
        job.describe()
    )
    (back,) = _events(job, "driver_resumed")
    assert (back["rank"], back["pid"], back["iteration"], back["ranks"]) == (
        1,
        elected["pid"],
        resumed,
        3,
    ), back
    assert 0 < back["since_death"] < 30, back
    assert len(_events(job, "closed")) == 1  # one driver finished the fit and stopped the workers
    assert no_leftover_processes(str(tmp_path)) == []


@pytest.mark.parametrize(
    "library, plan",
    [
        pytest.param(lib.values[0], plan, marks=lib.marks, id=f"{what}-{lib.id}")
        for what, plan in (
            ("recovery", "2:kill:estep_before:3,0:kill:estep_mid:3:0:recovery"),
            ("respawn", "2:kill:estep_before:3,0:kill:respawn"),
        )
        for lib in LIBRARIES
    ],
)
def test_a_driver_dead_while_it_recovers_a_worker_is_followed(
    library, plan, tmp_path, uninterrupted
):
    """Worker 2 dies in call 3; the driver dies while it sends the orphaned shards out, or
    once it started the replacement: the successor resumes from checkpoint 3 (call 3 never
    finished) and ends with the failure-free bits."""
    job = _followed(library[1], 4, plan, tmp_path / "job")
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, uninterrupted), job.describe()
    assert [e["worker"] for e in _events(job, "failure_detected")] == [2], job.describe()
    assert len(_events(job, "driver_elected")) == 1 and [
        e["iteration"] for e in _events(job, "resumed")
    ] == [3]
    assert no_leftover_processes(str(tmp_path)) == []


@pytest.mark.parametrize("library", LIBRARIES)
def test_without_a_checkpoint_a_dead_driver_ends_the_job_as_without_failover(library, tmp_path):
    """Failover asked for, but the fit writes no checkpoint: nothing to resume from, so the
    workers are never armed, the driver says so, and its death ends the job (exit 70 on the
    workers, nonzero for the job); no survivor takes over and runs the program again."""
    job = run_job(
        library[1],
        4,
        fit_args("gmm1d", 4000, 4, 1, ITS),
        tmp_path / "job",
        plan="0:kill:estep_before:3",
        env=FAILOVER,
    )
    assert job.rc != 0 and job.result is None, job.describe()
    assert "failover stays off for this fit: it writes no checkpoint" in job.stderr, job.describe()
    assert not _events(job, "failover_armed") and not _events(job, "driver_elected"), job.describe()
    assert len(_events(job, "start")) == 1, job.describe()
    assert no_leftover_processes(str(tmp_path)) == []


@pytest.mark.parametrize(
    "library", [pytest.param(lib.values[0], marks=lib.marks, id=lib.id) for lib in LIBRARIES]
)
def test_a_driver_dead_inside_a_shrink(library, tmp_path, uninterrupted):
    """Worker 2 dies in call 3; the driver tells the survivors to shrink and dies before it
    joins them. Under ULFM their Shrink leaves the driver out, so they see it gone and
    follow it from the shrunk communicator: the successor resumes from checkpoint 3. Under
    MPICH the emulated shrink waits for the dead driver: the survivors end at
    reconfigure_timeout (exit 71; it used to hang: MPICH's lock held the heartbeat thread
    that enforces the deadline), and the same command resumes. Same bits either way."""
    name, python = library
    plan = "2:kill:estep_mid:3,0:kill:shrink:1"
    job = _followed(python, 4, plan, tmp_path / "job", env={"MIXLE_MPI_RECONFIGURE_TIMEOUT": "8"})
    if name == "mpich":
        assert job.rc != 0 and job.result is None, (
            job.describe()
        )  # the survivors' 71, as Hydra reports it
        assert "reconfiguration overran its deadline" in job.stderr, job.describe()
        assert no_leftover_processes(str(tmp_path)) == []
        job = _followed(python, 4, plan, tmp_path / "job")  # the faults are spent: a plain resume
        assert [e["iteration"] for e in _events(job, "resumed")] == [3], job.describe()
    else:
        assert [e["cause"] for e in _events(job, "driver_failed")] == [
            "the driver died while the job reconfigured"
        ], job.describe()
        assert [e["survivors"] for e in _events(job, "driver_elected")] == [2], job.describe()
        assert [e["iteration"] for e in _events(job, "driver_resumed")] == [3], job.describe()
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, uninterrupted), job.describe()
    assert no_leftover_processes(str(tmp_path)) == []


# "kept": the continuation srun gives Open MPI (no new communicator can be built), forced
# under mpiexec: the survivors agree by messages and go on over views of the job's own
# communicator (runtime/keptcomm.py); the same path runs under srun in test_slurm
@pytest.mark.parametrize(
    "library, continuation",
    with_libraries([("auto",), ("keep",)], id_of=lambda row: f"five-ranks-{row[0]}"),
)
def test_two_driver_deaths_then_a_worker_death(library, continuation, tmp_path, uninterrupted):
    """The first driver dies before its E-step call 2 (after checkpoint 2), its successor
    while writing checkpoint 5 (its calls 0-2), and worker 2 of the third driver in that
    driver's call 3 (iteration 8): no earlier driver reaches a call 3."""
    plan = "0:kill:estep_before:2,0:kill:checkpoint_write:5,2:kill:estep_mid:3"
    # the fit waits for worker 2's replacement: the third driver's Spawn must really work
    job = _followed(
        library[1],
        5,
        plan,
        tmp_path / "job",
        env={"MIXLE_MPI_RESPAWN_WAIT": "1", "MIXLE_MPI_CONTINUATION": continuation},
    )
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, uninterrupted), job.describe()
    assert [e["survivors"] for e in _events(job, "driver_elected")] == [4, 3]
    assert [e["worker"] for e in _events(job, "failure_detected")] == [2]
    assert [e["worker"] for e in _events(job, "respawned")] == [2], job.describe()
    if continuation == "keep":
        assert {e["method"] for e in _events(job, "continuation")} == {"keep"}, job.describe()
        assert all(
            "over the job's own communicator" in e["failover"] for e in _events(job, "continuation")
        )
    assert no_leftover_processes(str(tmp_path)) == []


@pytest.mark.parametrize("library", with_libraries([()], id_of=lambda row: "spare"))
def test_spares_and_blacklisting_go_on_after_a_takeover(library, tmp_path, uninterrupted):
    """Five ranks with one spare (max_retries=2, respawn off). The driver dies before its call 2; its
    successor drives two workers and keeps the spare (rank 3 of the survivors). Worker 1
    dies in the successor's call 3 and the spare takes its place; the spare, now worker 1's
    incarnation 1, dies in call 5: the place's second failure blacklists it and its shards
    migrate. Same bits as a failure-free fit."""
    plan = "0:kill:estep_before:2,1:kill:estep_mid:3,1:kill:estep_mid:5:1"
    job = _followed(
        library[1],
        5,
        plan,
        tmp_path / "job",
        env={"MIXLE_MPI_SPARES": "1", "MIXLE_MPI_RESPAWN": "0"},
    )
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, uninterrupted), job.describe()
    starts = _events(job, "start")
    assert [(e["workers"], e["spares"]) for e in starts] == [(3, 1), (2, 1)], job.describe()
    assert [e["survivors"] for e in _events(job, "driver_elected")] == [4]
    assert [(e["worker"], e["spare"]) for e in _events(job, "spare_adopted")] == [(1, 3)], (
        job.describe()
    )
    assert [e["worker"] for e in _events(job, "blacklisted")] == [1], job.describe()
    assert _events(job, "migrated"), job.describe()
    assert job.result["blacklist"] == [1], job.describe()
    assert no_leftover_processes(str(tmp_path)) == []


@pytest.mark.parametrize(
    "library", [pytest.param(lib.values[0], marks=lib.marks, id=lib.id) for lib in LIBRARIES]
)  # the silence path is the one without failover
def test_a_stopped_driver_is_never_replaced(library, tmp_path):
    """SIGSTOP, not death: the driver may wake up and write, so no survivor takes over (there
    are never two drivers); the workers end after driver_timeout, the launcher ends the job
    kept alive only by the stopped driver, and a rerun would resume."""
    job = _followed(
        library[1],
        4,
        "0:stop:estep_before:3",
        tmp_path / "job",
        env={"MIXLE_MPI_DRIVER_TIMEOUT": "4"},
    )
    assert job.rc != 0 and job.result is None, job.describe()
    assert not _events(job, "driver_elected") and not _events(job, "driver_failed"), job.describe()
    assert "heard nothing from the driver for" in job.stderr + job.stdout, job.describe()
    assert no_leftover_processes(str(tmp_path)) == []


def test_a_driver_with_no_worker_left_to_follow_it_is_run_again(tmp_path, uninterrupted):
    """Two ranks: the one worker takes over but has no one to compute; it says so and exits
    74, and `mixle-mpi run` runs the job again, which resumes to the same bits."""
    job = _followed(OMPI_PYTHON, 2, "0:kill:estep_before:3", tmp_path / "job")
    assert job.rc == 0, job.describe()
    assert "no other rank survived to compute" in job.stderr + job.stdout, job.describe()
    assert "running it again to resume" in job.stderr + job.stdout, job.describe()
    assert same_fit(job.result, uninterrupted), job.describe()


def _iris_fit(max_its: int, python: str = sys.executable) -> list[str]:
    return [
        python,
        "-m",
        "mixle_mpi",
        "fit",
        "-n",
        "4",
        "--timeout",
        "200",
        "--data",
        "builtin:iris",
        "--model",
        "gmm:k=3,cov=full",
        "--columns",
        "0:4",
        "--num-shards",
        "6",
        "--max-its",
        str(max_its),
        "--seed",
        "3",
        "--init-p",
        "0.5",
        "--progress",
        "off",
    ]


def _running_driver(out: Path, proc: subprocess.Popen, checkpoint: str = "ck.h5") -> int:
    """Once the fit in ``out`` has checkpointed: its driver's pid, from its start event."""
    wait_for_checkpoint(out / checkpoint, 1, proc)
    start = next(e for e in read_events(str(out / "events.jsonl")) if e["event"] == "start")
    return start["driver_pid"]


@pytest.mark.parametrize("library", LIBRARIES)
def test_fit_survives_its_driver_killed_from_outside_with_no_flag_set(library, tmp_path):
    """`mixle-mpi fit` with no resilience flag: it checkpoints into its out-dir and failover is
    armed by default, so rank 0 SIGKILLed from outside once the fit runs ends in exit 0, no
    rerun, and the failure-free outputs, written once, by the successor."""
    _, python = library
    base = _iris_fit(120, python)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIXLE_MPI_")} | {
        "PYTHONWARNINGS": "ignore"
    }
    ref = subprocess.run(
        base + ["--out-dir", str(tmp_path / "ref")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=str(tmp_path),
    )
    assert ref.returncode == 0, ref.stderr[-3000:]
    out = tmp_path / "killed"
    proc = subprocess.Popen(
        base + ["--out-dir", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=str(tmp_path),
    )
    try:
        pid = _running_driver(out, proc, "checkpoint.h5")
        os.kill(pid, signal.SIGKILL)
        text, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, text[-4000:]
    assert "running it again" not in text, text[-4000:]  # no rerun: the survivors carried on
    assert (out / "model.json").read_text() == (tmp_path / "ref" / "model.json").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ll"] == json.loads((tmp_path / "ref" / "summary.json").read_text())["ll"]
    assert summary["driver_takeovers"] == 1 and "a survivor took over" in text, text[-3000:]
    assert f"the driver (pid {pid} on" in text and "drives now, over 3 surviving rank(s)" in text, (
        text[-3000:]
    )
    # one story: the summary, the model's receipt, status and inspect all tell of the driver's death
    assert summary["failures_survived"] >= 1
    receipt = json.loads((out / "model.json").read_text())["fit_provenance"]
    best = summary["restarts"][summary["best_restart"]]
    assert (receipt["seed"], receipt["converged"], receipt["iterations"]) == (
        best["seed"],
        best["converged"],
        best["iterations"],
    )
    status = subprocess.run(
        [python, "-m", "mixle_mpi", "status", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert "the driver x1" in status.stdout and "(driver) " in status.stdout, status.stdout
    seen = subprocess.run(
        [python, "-m", "mixle_mpi", "inspect", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert f"the driver (pid {pid} on" in seen.stdout and "no rank failed" not in seen.stdout, (
        seen.stdout
    )
    assert no_leftover_processes(str(out)) == []


def test_sigterm_after_a_takeover_reaches_the_new_driver(tmp_path):
    """The launcher forwards SIGTERM to whichever driver runs now: after a takeover the
    successor checkpoints and the job exits 75; the same command then resumes to the bits
    of a failure-free fit."""
    base = _iris_fit(300)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    out = tmp_path / "run"
    cmd = base + ["--out-dir", str(out), "--checkpoint", str(out / "ck.h5"), "--failover"]
    log = tmp_path / "first.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, text=True, env=env, cwd=str(tmp_path)
        )
    try:
        os.kill(_running_driver(out, proc), signal.SIGKILL)
        deadline = time.monotonic() + 120
        while "drives now" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        while "resumed" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert proc.returncode == 75 and "preempted: received SIGTERM" in text, text[-4000:]
    again = subprocess.run(
        base + ["--out-dir", str(out), "--checkpoint", str(out / "ck.h5")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=str(tmp_path),
    )
    assert again.returncode == 0, again.stderr[-3000:]
    ref = subprocess.run(
        base + ["--out-dir", str(tmp_path / "ref")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=str(tmp_path),
    )
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert (out / "model.json").read_text() == (tmp_path / "ref" / "model.json").read_text()
    assert no_leftover_processes(str(out)) == []
