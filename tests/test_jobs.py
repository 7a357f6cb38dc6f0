"""Every ready job in jobs/ runs as it is (small sizes through its environment knobs)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from mpiharness import OMPI_PYTHON, REPO

from mixle_mpi.chaos.campaign import FAULT_LOG, read_fired, unfired
from mixle_mpi.storage import checkpoint as ckpt

pytestmark = pytest.mark.mpijob
JOBS = REPO / "jobs"
SMALL = {
    "N": "3000",
    "MAX_ITS": "4",
    "RUNS": "1",
    "RESTARTS": "2",
    "SHARDS": "6",
    "RANKS": "3",
    "PYTHONWARNINGS": "ignore",
}


def run_job(script: str, tmp_path: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    bindir = str(Path(OMPI_PYTHON).parent)
    env = {
        **os.environ,
        **SMALL,
        "PATH": bindir + os.pathsep + os.environ["PATH"],
        "WORK": str(tmp_path / "work"),
    }
    env.pop("MIXLE_MPI_FAULT_PLAN", None)
    return subprocess.run(
        ["bash", str(JOBS / script)],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        env=env,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "script, out, check",
    [
        ("fit.sh", "fit", "no rank failed"),
        ("best_of.sh", "best_of", "best is restart"),
        ("large_data.sh", "large", "driver peak RSS"),
        pytest.param(
            "chaos.sh",
            "chaos",
            "1/1 runs passed (every planned fault fired, bits identical to the reference)",
        ),
    ],
)
def test_job_runs_as_it_is(script, out, check, tmp_path):
    proc = run_job(script, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert check in proc.stdout
    if script != "chaos.sh":
        summary = json.loads((tmp_path / "work" / out / "summary.json").read_text())
        assert summary["iterations"] >= 1 and summary["rows"] == 3000
    if (
        script == "chaos.sh"
    ):  # the one run's planned fault fired in a real worker, which recorded it
        report = json.loads((tmp_path / "work" / "chaos" / "campaign.json").read_text())
        (run,) = report["runs"]
        assert report["ok"] and run["outcome"] == "ok" and run["identical"], run
        assert run["faults"] >= 1 and run["fired"] == run["faults"] and run["unfired"] == [], run
        records = read_fired(os.path.join(run["out_dir"], FAULT_LOG))
        assert unfired(run["plan"], records) == [] and len(records) == run["faults"], (
            run["plan"],
            records,
        )
        assert f"{run['faults']}/{run['faults']} planned faults fired" in proc.stdout
    if script == "fit.sh":
        assert (tmp_path / "work" / "fit" / "fit.png").exists()
        assert (tmp_path / "work" / "fit" / "checkpoint.h5").exists()


def test_job_file_example_is_valid(tmp_path):
    from mixle_mpi.cli.jobconfig import read_toml, resolve

    cfg = resolve(read_toml(str(JOBS / "job.toml")), {})
    assert cfg.data == "builtin:iris" and cfg.model == "gmm:k=3,cov=full"
    # the shipped file keeps the default cadence and a checkpoint that moves with --out-dir
    assert cfg.checkpoint_every is None and cfg.checkpoint_seconds is None
    assert cfg.checkpoint == os.path.join(cfg.out_dir, "checkpoint.h5")


def test_api_example_runs_prints_each_iteration_and_resumes_from_its_checkpoint(tmp_path):
    ck = tmp_path / "api.ckpt.h5"
    env = {**os.environ, "N": "3000", "MAX_ITS": "4", "CHECKPOINT": str(ck)}
    env.pop("MIXLE_MPI_FAULT_PLAN", None)
    cmd = [
        OMPI_PYTHON,
        "-m",
        "mixle_mpi",
        "run",
        "-n",
        "3",
        "--timeout",
        "200",
        "--",
        OMPI_PYTHON,
        str(JOBS / "api_fit.py"),
    ]
    runs = [
        subprocess.run(cmd, capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=260)
        for _ in range(2)
    ]
    for proc in runs:
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "rounds with failures: []" in proc.stdout
    first, again = runs
    lines = [ln for ln in first.stdout.splitlines() if ln.startswith("it ")]
    assert [ln.split()[1] for ln in lines] == ["1", "2", "3", "4"], first.stdout
    assert lines[0].endswith(f"(checkpoint {ck})") and lines[-1].endswith(f"(checkpoint {ck})"), (
        first.stdout
    )
    assert ckpt.read(str(ck)).finished
    assert f"resumed {ck} after iteration 4" in again.stderr, again.stderr
    final = [ln for ln in first.stdout.splitlines() if "final log-likelihood" in ln]
    assert final and final[0] in again.stdout  # the same bits from the checkpoint


DEFAULT_FIT = """
import numpy as np
import mixle.stats as st
from mixle_mpi import ResilientMPIEncodedData, fit, is_driver

est = st.MixtureEstimator([st.DiagonalGaussianEstimator(dim=2)] * 2)
data = np.random.default_rng(0).normal(size=(2000, 2)) if is_driver() else None
with ResilientMPIEncodedData(data, estimator=est, num_shards=4) as enc:
    model, lls = fit(enc, est, max_its=5, delta=None, seed=1)   # no checkpoint argument
    print("LLS", repr(lls), flush=True)
"""


def test_the_python_fit_checkpoints_into_its_work_folder_by_default_and_resumes(tmp_path):
    """``fit`` with no checkpoint argument writes ``mixle_mpi_run/checkpoint.h5`` (the handle's
    work folder); the same script run again resumes the finished fit, to the same bits."""
    script = tmp_path / "my_fit.py"
    script.write_text(DEFAULT_FIT)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for name in ("MIXLE_MPI_FAULT_PLAN", "MIXLE_MPI_WORKDIR", "MIXLE_MPI_EVENT_LOG"):
        env.pop(name, None)
    cmd = [
        OMPI_PYTHON,
        "-m",
        "mixle_mpi",
        "run",
        "-n",
        "3",
        "--timeout",
        "150",
        "--",
        OMPI_PYTHON,
        str(script),
    ]
    first, again = [
        subprocess.run(cmd, capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=200)
        for _ in range(2)
    ]
    assert first.returncode == 0 and again.returncode == 0, (
        first.stderr[-3000:] + again.stderr[-3000:]
    )
    ck = tmp_path / "mixle_mpi_run" / "checkpoint.h5"
    state = ckpt.read(str(ck))
    assert state.finished and state.iteration == 5
    assert "resumed" not in first.stderr and f"resumed {ck}" in again.stderr, again.stderr[-3000:]
    lls = [ln for ln in first.stdout.splitlines() if ln.startswith("LLS")]
    assert len(lls) == 1 and lls == [ln for ln in again.stdout.splitlines() if ln.startswith("LLS")]
