"""A real fit from a big CSV, watched with ``status`` while it runs and inspected after."""

from __future__ import annotations

import json
import os
import subprocess
import time

import numpy as np
import pytest
from mpiharness import OMPI_PYTHON, no_leftover_processes

from mixle_mpi.cli import datainput
from mixle_mpi.cli.status import status_lines
from mixle_mpi.storage.store import ShardStore

pytestmark = pytest.mark.mpijob
ENV = {
    "PYTHONWARNINGS": "ignore",
    "MIXLE_MPI_DRIVER_TIMEOUT": "30",
    "MIXLE_MPI_RECONFIGURE_TIMEOUT": "20",
}
ROWS, COLS = (
    300_000,
    4,
)  # 9.6 MB of numbers: above SPILL_BYTES, so parsed into a temporary HDF5 file


def cli(*args: str, cwd, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [OMPI_PYTHON, "-m", "mixle_mpi", *args],
        capture_output=True,
        text=True,
        cwd=str(cwd),
        env={**os.environ, **ENV},
        timeout=timeout,
    )


def test_status_while_a_csv_fit_runs_then_inspect(tmp_path):
    assert ROWS * COLS * 8 > datainput.SPILL_BYTES
    rng = np.random.RandomState(4)
    x = rng.normal(size=(ROWS, COLS)) + np.where(rng.rand(ROWS, 1) < 0.4, 3.0, 0.0)
    csv = tmp_path / "data.csv"
    np.savetxt(
        csv, x, delimiter=",", header="a,b,c,d", comments="", fmt="%.17g"
    )  # exact round trip
    out = tmp_path / "out"
    args = [
        "fit",
        "-n",
        "3",
        "--timeout",
        "300",
        "--data",
        str(csv),
        "--model",
        "gmm:k=2,cov=diag",
        "--num-shards",
        "4",
        "--max-its",
        "6",
        "--delta",
        "none",
        "--restarts",
        "2",
        "--checkpoint",
        str(out / "ck.h5"),
        "--out-dir",
        str(out),
        "--progress",
        "line",
        "--keep-store",
    ]
    proc = subprocess.Popen(
        [OMPI_PYTHON, "-m", "mixle_mpi", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(tmp_path),
        env={**os.environ, **ENV},
    )
    seen = []
    while proc.poll() is None:
        if (out / "progress.json").exists() and not (out / "summary.json").exists():
            seen.append(status_lines(str(out)))
        time.sleep(0.1)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr[-4000:]
    running = [lines for lines in seen if "running" in lines[0]]
    assert running, f"status never saw the fit running: {seen[:3]}"
    assert any(line.startswith(("iteration ", "restart ")) for line in running[-1]), running[-1]
    assert any(line.startswith("ranks: 2 live [1, 2]; 0 failed") for line in running[-1]), running[
        -1
    ]

    assert (
        f"2 restarts, each with its own checkpoint: {out / 'ck.r0.h5'}, {out / 'ck.r1.h5'}"
        in stdout
    )
    record = json.loads((out / "progress.json").read_text())
    assert (record["restart"], record["iteration"], record["ranks"]["live"]) == ("2/2", 6, [1, 2])
    assert not [
        p for p in os.listdir(out) if p.startswith("mixle_mpi_csv_")
    ]  # the spill file is gone

    with (
        ShardStore.create(
            tmp_path / "expected.h5", np.loadtxt(csv, delimiter=",", skiprows=1), 4
        ) as expected,
        ShardStore.open(out / "work" / "shards.h5") as got,
    ):
        assert got.fingerprint() == expected.fingerprint()  # the CSV path stored the exact values

    status = cli("status", str(out), cwd=tmp_path)
    assert (
        status.returncode == 0
        and ": finished" in status.stdout
        and "6 iterations (stopped at the iteration cap)" in status.stdout
    ), status.stdout
    report = cli("inspect", str(out / "ck.h5"), str(out / "model.json"), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    for needle in (
        "is the base name of 2 restart checkpoints",
        "checkpoint after iteration 6 (finished)",
        "mixture of 2 components, weights",
        "diagonal Gaussian (4-D): mean",
        "variances",
    ):
        assert needle in report.stdout, report.stdout
    assert not no_leftover_processes(str(out))
