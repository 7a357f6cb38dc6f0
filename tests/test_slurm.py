"""The rendered SLURM templates on a real single-node SLURM (scripts/slurm-local.sh).

A session fixture starts munge, slurmctld and slurmd in a temporary folder and stops them
at the end. Every submission is polled (squeue, ``scontrol -o show job``) with a deadline;
nothing waits with ``sbatch --wait``. The fits are small: SLURM's own latencies (a requeued
job restarts after ``cred_expire``, 10 s here) dominate.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from mpiharness import OMPI_PYTHON, mpich_python, no_leftover_processes, same_fit

from mixle_mpi.chaos.fault_plan import FIRED_ENV, read_fired, unfired
from mixle_mpi.cli import slurm

SLURM_BINARIES = (
    "sbatch",
    "squeue",
    "scontrol",
    "scancel",
    "sinfo",
    "srun",
    "slurmctld",
    "slurmd",
    "munged",
    "mungekey",
)
MISSING = [b for b in SLURM_BINARIES if shutil.which(b) is None]

pytestmark = [
    pytest.mark.mpijob,
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"SLURM is not installed (missing {', '.join(MISSING)}); "
        "scripts/install-slurm.sh installs it",
    ),
]

FIT = (
    '"$PY" -m mixle_mpi.fitjob --model gmm1d --n {n} --max-its {its} --num-shards 4 --quiet '
    '--workdir "$OUT_DIR/work" --checkpoint "$OUT_DIR/fit.ckpt.h5" --out "$OUT_DIR/result.json"'
)
SINGLE_FIT = FIT.format(n=20000, its=10)  # the same fit under ft (plain and interrupted) and srun


def _render(kind: str, out_dir: Path, **opts) -> str:
    base = {
        "job_name": f"t-{kind}",
        "ntasks": 3,
        "time": "10",
        "signal_margin": 60,
        "max_requeues": 1,
        "python": OMPI_PYTHON,
        "out_dir": str(out_dir),
        "fit_cmd": SINGLE_FIT,
    }
    return slurm.render(kind, **{**base, **opts})


def _output(folder: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(folder.glob("*.out")))


def _result(out_dir: Path) -> dict:
    return json.loads((out_dir / "result.json").read_text())


def _events(out_dir: Path) -> list[dict]:
    return [
        json.loads(line)
        for line in (out_dir / "work" / "events.jsonl").read_text().splitlines()
        if line.strip()
    ]


@pytest.fixture(scope="module")
def uninterrupted(cluster, tmp_path_factory):
    """The ft template's fit, run once without interruption (also the bits others must match)."""
    folder = tmp_path_factory.mktemp("ft")
    job = cluster.submit(_render("ft", folder / "out"), folder, "ft")
    (rec,) = cluster.wait_done(job)
    return folder, rec


def test_ft_template_completes_a_fit(uninterrupted):
    folder, rec = uninterrupted
    log = _output(folder)
    assert (rec["JobState"], rec["ExitCode"], rec["Restarts"]) == ("COMPLETED", "0:0", "0"), log
    result = _result(folder / "out")
    assert result["iterations"] == 10 and len(result["ll"]) == 10 and result["num_shards"] == 4
    assert "--with-ft ulfm" in log and "the fit finished (exit 0)" in log
    assert "restart count 0 of at most 1" in log


def test_the_tutorial_runs_on_slurm(cluster, tmp_path):
    """docs/tutorial.md from install check to resume, its SLURM blocks included. It runs the
    shipped jobs/job.toml with `slurm ft --out-dir`: the checkpoint moves with the out-dir (it
    used to stay in the job file's folder, which did not exist: exit 2 after the queue wait)."""
    from test_docs import run_blocks

    env = {k: v for k, v in cluster.env.items() if not k.startswith("MIXLE_MPI_")}
    assert run_blocks("docs/tutorial.md", tmp_path, tags=("", "slurm"), env=env) >= 6
    out = tmp_path / "runs" / "first"
    assert (out / "checkpoint.h5").exists() and (out / "model.json").exists()
    assert not (tmp_path / "mixle_mpi_jobs").exists()  # nothing in the job file's own folder
    assert no_leftover_processes(str(tmp_path)) == []


@pytest.mark.parametrize("ntasks", [4, 8])
def test_ft_template_with_a_mistyped_data_path_fails_fast(cluster, ntasks, tmp_path):
    """A user's typo in job.toml: the job FAILS with exit 2 and the message, within seconds;
    it does not sit RUNNING until its time limit (as it did at 4+ ranks under Open MPI)."""
    (tmp_path / "job.toml").write_text(
        '[fit]\ndata = "mesurements.h5:/run1/X"\nmodel = "gmm:k=3"\n'
    )
    text = slurm.render(
        "ft",
        job_name="t-typo",
        ntasks=ntasks,
        time="10",
        signal_margin=60,
        python=OMPI_PYTHON,
        out_dir="out",
    )
    job = cluster.submit(text, tmp_path, "ft")
    (rec,) = cluster.wait_done(job, deadline=120)
    log = _output(tmp_path)
    assert (rec["JobState"], rec["ExitCode"]) == ("FAILED", "2:0"), log
    assert "no such data file 'mesurements.h5'" in log
    assert "MPI_ABORT" not in log
    assert no_leftover_processes(str(tmp_path)) == []


def test_time_limit_signal_checkpoints_requeues_and_resumes_to_the_same_bits(
    cluster, uninterrupted, tmp_path
):
    job = cluster.submit(_render("ft", tmp_path / "out"), tmp_path, "ft")
    # The launcher takes signals once it has said "launching"; before that the script ignores them.
    end = time.monotonic() + 60
    while "launching:" not in _output(tmp_path):
        assert time.monotonic() < end, (
            f"the launcher did not start:\n{_output(tmp_path)}\n{cluster.jobs(job)}"
        )
        time.sleep(0.1)
    sent = cluster.run("scancel", "--signal=USR1", "--batch", job)
    assert sent.returncode == 0, sent.stderr
    (rec,) = cluster.wait_done(job, deadline=150)
    log = _output(tmp_path)
    assert (rec["JobState"], rec["ExitCode"], rec["Restarts"]) == ("COMPLETED", "0:0", "1"), log
    # first start: USR1 reached the driver only, which checkpointed and exited 75; the script requeued
    assert "received SIGUSR1: passed it to the driver" in log
    assert "received SIGUSR1 after iteration" in log and "ready for a requeue" in log
    assert f"checkpointed (exit 75): requeueing job {job} (restart 1 of at most 1)" in log
    # a planned stop is a checkpoint and a requeue: not a failure, said once, no worker acted on it
    assert (
        "driver failed" not in log
        and "driver reported" not in log
        and "exiting with code" not in log
    ), log
    assert log.count("received SIGUSR1 after iteration") == 1, log
    # second start (SLURM_RESTART_COUNT=1) resumed from the checkpoint and finished
    assert "start 2, restart count 1 of at most 1" in log and "the fit finished (exit 0)" in log
    resumed = [e for e in _events(tmp_path / "out") if e["event"] == "resumed"]
    assert len(resumed) == 1 and 1 <= resumed[0]["iteration"] < 10, log
    assert same_fit(_result(tmp_path / "out"), _result(uninterrupted[0] / "out"))


def test_restart_bound_fails_clearly_with_exit_75(cluster, tmp_path):
    text = _render("ft", tmp_path / "out", max_requeues=0, fit_cmd=FIT.format(n=20000, its=40))
    job = cluster.submit(text, tmp_path, "ft")
    end = time.monotonic() + 60
    while "launching:" not in _output(tmp_path):
        assert time.monotonic() < end, _output(tmp_path)
        time.sleep(0.1)
    assert cluster.run("scancel", "--signal=USR1", "--batch", job).returncode == 0
    (rec,) = cluster.wait_done(job, deadline=90)
    log = _output(tmp_path)
    assert (rec["JobState"], rec["ExitCode"], rec["Restarts"]) == ("FAILED", "75:0", "0"), log
    assert (
        "--max-requeues 0): not requeueing; resubmit this script to resume from the checkpoint"
        in log
    )


def test_array_best_of_n_is_collected(cluster, tmp_path):
    out = tmp_path / "out"
    text = _render(
        "array",
        out,
        ntasks=2,
        array="0-2",
        base_seed=11,
        fit_cmd=FIT.format(n=3000, its=6) + ' --seed "$SEED"',
    )
    job = cluster.submit(text, tmp_path, "array")
    records = cluster.wait_done(job, deadline=150)
    log = _output(tmp_path)
    assert sorted(r["ArrayTaskId"] for r in records) == ["0", "1", "2"], records
    assert all((r["JobState"], r["ExitCode"]) == ("COMPLETED", "0:0") for r in records), log
    for task in range(3):
        assert f"array task {task}: seed {11 + task}, output {out}/task-{task}" in log
    results = {t: _result(out / f"task-{t}") for t in range(3)}
    finals = {t: r["ll"][-1] for t, r in results.items()}
    assert len(set(finals.values())) == 3, finals  # three seeds, three different fits
    best = max(finals, key=finals.get)
    report = tmp_path / "best.json"
    got = subprocess.run(
        [OMPI_PYTHON, "-m", "mixle_mpi", "collect", str(out), "-o", str(report)],
        capture_output=True,
        text=True,
        timeout=60,
        env=cluster.env,
    )
    assert got.returncode == 0, got.stderr
    collected = json.loads(report.read_text())
    assert collected["best"] == str(out / f"task-{best}" / "result.json")
    assert collected["final_ll"] == finals[best]
    assert collected["summary"]["model"] == results[best]["model"]
    assert collected["summary"]["ll"] == results[best]["ll"]
    assert len(collected["candidates"]) == 3


def test_srun_template_completes_the_same_fit(cluster, uninterrupted, tmp_path):
    job = cluster.submit(_render("srun", tmp_path / "out"), tmp_path, "srun")
    (rec,) = cluster.wait_done(job)
    log = _output(tmp_path)
    assert (rec["JobState"], rec["ExitCode"]) == ("COMPLETED", "0:0"), log
    assert "srun --mpi=pmix --kill-on-bad-exit=0 --wait=0" in log
    assert "(shrink: keep)" in log  # no ULFM, no PMIx groups under srun: the communicator is kept
    # a failure-free fit does not depend on the launcher: the same bits as under mpiexec
    assert same_fit(_result(tmp_path / "out"), _result(uninterrupted[0] / "out"))


def _job_processes_gone(marker: str, grace: float = 10.0) -> list[str]:
    """Processes whose command line mentions ``marker``, after up to ``grace`` s for slurmd to reap them."""
    end = time.monotonic() + grace
    while (left := no_leftover_processes(marker)) and time.monotonic() < end:
        time.sleep(0.2)
    return left


# Every MPI that srun can launch: Open MPI through SLURM's pmix plugin, MPICH through pmi2
# (the Open MPI wheel under --mpi=pmi2 runs each task as its own one-rank job; MPICH under
# --mpi=pmix does not start: its wheel has no PMIx client).
SRUN_MPIS = [
    pytest.param(("openmpi", OMPI_PYTHON, "pmix", "keep", 1), id="openmpi-pmix-spare"),
    pytest.param(
        ("mpich", mpich_python(), "pmi2", "emulated", 0),
        id="mpich-pmi2",
        marks=pytest.mark.skipif(mpich_python() is None, reason="no MPICH environment"),
    ),
]
SRUN_DEATH = "2:kill:estep_mid:3"


@pytest.fixture(scope="module")
def srun_deaths(cluster, tmp_path_factory):
    """One srun-template fit per MPI, each with worker 2 SIGKILLed in the middle of E-step call
    3; submitted together so that they run side by side (one SLURM run's time in all). The
    Open MPI one has a hot spare (4 tasks: 2 workers and 1 spare), which takes the dead
    worker's place; the MPICH one has none, so the shards migrate."""
    jobs = {}
    for param in SRUN_MPIS:
        name, python, _, _, spares = param.values[0]
        if python is None:
            continue
        folder = tmp_path_factory.mktemp(f"srun-death-{name}")
        env = {
            "MIXLE_MPI_FAULT_PLAN": SRUN_DEATH,
            FIRED_ENV: str(folder / "faults.jsonl"),
            "MIXLE_MPI_RECONFIGURE_TIMEOUT": "15",
            "MIXLE_MPI_SPARES": str(spares),
            # a start that hangs anyway (as MPICH's did on a stale /dev/shm segment, slurm/README.md)
            # is ended by the startup alarm and launched again (exit 73 path) within the deadline
            "MIXLE_MPI_STARTUP_TIMEOUT": "45",
        }
        text = _render("srun", folder / "out", python=python, ntasks=3 + spares)
        jobs[name] = (folder, cluster.submit(text, folder, "srun", env=env))
    return jobs


@pytest.mark.parametrize("mpi", SRUN_MPIS)
def test_srun_template_survives_a_worker_death_with_the_same_bits(
    cluster, uninterrupted, srun_deaths, mpi
):
    """Issue 11.4: under a direct srun launch a SIGKILLed worker is survived. srun -K0
    --wait=0 keeps the other tasks; Open MPI's ranks left SLURM's PMIx after the start, so the
    pmix plugin does not cancel the step; the death is detected by heartbeat, the shards are
    recomputed, then the spare takes the dead worker's place (Open MPI run) or, with no spare
    and no Spawn under srun, the shards migrate for good (MPICH run); the job continues on its
    original communicator (Open MPI: keep) or a Create_from_group one (MPICH: emulated). The
    model is bit-identical to the failure-free fit under mpiexec."""
    name, _, plugin, method, spares = mpi
    folder, job = srun_deaths[name]
    (rec,) = cluster.wait_done(job, deadline=200)
    log = _output(folder)
    assert (rec["JobState"], rec["ExitCode"]) == ("COMPLETED", "0:0"), log
    assert f"srun --mpi={plugin} --kill-on-bad-exit=0 --wait=0" in log, log
    records = read_fired(
        str(folder / "faults.jsonl")
    )  # written by the victim just before it SIGKILLed itself
    assert unfired(SRUN_DEATH, records) == [] and len(records) == 1, (records, log)
    result = _result(folder / "out")
    assert same_fit(result, _result(uninterrupted[0] / "out")), log
    assert {int(k): v for k, v in result["failures"].items() if v} == {2: 1}, result
    events = _events(folder / "out")
    kinds = [e["event"] for e in events]
    (chosen,) = [e for e in events if e["event"] == "continuation"]
    assert chosen["method"] == method and "unavailable" in chosen["respawn"], chosen
    detected = [e for e in events if e["event"] == "failure_detected"]
    assert [e["worker"] for e in detected] == [2] and detected[0]["cause"].startswith(
        "heartbeat"
    ), log
    assert detected[0]["pid"] == records[0]["pid"], (
        detected,
        records,
    )  # the victim is the one detected
    if method == "keep":
        (kept,) = [e for e in events if e["event"] == "kept"]
        assert kept["dropped"] == [2] and kept["survivors"] == [1, 3], kept  # rank 3 is the spare
        assert "shrink" not in kinds and "left SLURM's PMIx server" in log, log
    else:
        assert [e["method"] for e in events if e["event"] == "shrink"] == ["emulated"], log
    if spares:  # the spare (rank 3) takes worker 2's place at once: no Spawn, no migration
        (adopted,) = [e for e in events if e["event"] == "spare_adopted"]
        assert (adopted["worker"], adopted["spare"]) == (2, 3), adopted
        assert (
            result["blacklist"] == []
            and "migrated" not in kinds
            and "spawn_unavailable" not in kinds
        ), kinds
    else:  # no Spawn under srun: the place is given up and its shards move to the survivor
        assert (
            result["blacklist"] == [2] and "spawn_unavailable" in kinds and "migrated" in kinds
        ), kinds
    assert "the fit finished (exit 0)" in log and "CANCELLED" not in log, log
    assert _job_processes_gone(str(folder)) == []


SRUN_DRIVER_DEATH = "0:kill:estep_before:3"


@pytest.fixture(scope="module")
def srun_driver_deaths(cluster, tmp_path_factory):
    """One srun-template fit per MPI with failover on (3 tasks), whose driver is SIGKILLed
    before E-step call 3; submitted together, as srun_deaths."""
    jobs = {}
    for param in SRUN_MPIS:
        name, python, *_ = param.values[0]
        if python is None:
            continue
        folder = tmp_path_factory.mktemp(f"srun-driver-{name}")
        env = {
            "MIXLE_MPI_FAULT_PLAN": SRUN_DRIVER_DEATH,
            FIRED_ENV: str(folder / "faults.jsonl"),
            "MIXLE_MPI_FAILOVER": "1",
            "MIXLE_MPI_RECONFIGURE_TIMEOUT": "15",
            "MIXLE_MPI_STARTUP_TIMEOUT": "45",
        }
        jobs[name] = (
            folder,
            cluster.submit(_render("srun", folder / "out", python=python), folder, "srun", env=env),
        )
    return jobs


@pytest.mark.parametrize("mpi", SRUN_MPIS)
def test_srun_template_survives_its_driver_death_with_the_same_bits(
    cluster, uninterrupted, srun_driver_deaths, mpi
):
    """Issue 12 under srun: the driver (task 0) is SIGKILLed; srun -K0 keeps the others, the
    two workers agree by messages, and the lower takes over: over views of the job's own
    communicator under Open MPI (keep), over a Create_from_group one under MPICH. It resumes
    from the checkpoint, and the job ends 0 with the failure-free bits, within one run."""
    name, _, plugin, method, _ = mpi
    folder, job = srun_driver_deaths[name]
    (rec,) = cluster.wait_done(job, deadline=200)
    log = _output(folder)
    assert (rec["JobState"], rec["ExitCode"], rec.get("Restarts")) == ("COMPLETED", "0:0", "0"), log
    records = read_fired(str(folder / "faults.jsonl"))
    assert unfired(SRUN_DRIVER_DEATH, records) == [] and len(records) == 1, (records, log)
    assert same_fit(_result(folder / "out"), _result(uninterrupted[0] / "out")), log
    events = _events(folder / "out")
    continuations = [e for e in events if e["event"] == "continuation"]
    assert [e["method"] for e in continuations] == [method, method], continuations
    (failed,), (elected,) = (
        [e for e in events if e["event"] == kind] for kind in ("driver_failed", "driver_elected")
    )
    assert failed["pid"] == records[0]["pid"] and (elected["rank"], elected["survivors"]) == (
        1,
        2,
    ), (failed, elected)
    (back,) = [e for e in events if e["event"] == "driver_resumed"]
    assert back["iteration"] == 3 and back["pid"] == elected["pid"], back
    assert "the fit finished (exit 0)" in log and "CANCELLED" not in log, log
    assert _job_processes_gone(str(folder)) == []
