"""Bad input ends fast on the driver with a clear message and a nonzero exit, never a hang."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LIBRARIES, with_libraries
from mpiharness import OMPI_PYTHON, REPO, no_leftover_processes

pytestmark = pytest.mark.mpijob
JOB = str(REPO / "tests" / "jobs" / "bad_input.py")

CASES = {
    "empty": "data is empty",
    "too_few": "found 3 observations but num_shards=8",
    "nan": "NaN",
    "ragged": "has shape (2,), expected (3,)",
    "mismatch": "does not match the data",
    "columns_1d": "do not flatten the rows (that would mix the variables up); use a multivariate estimator instead, "
    "such as DiagonalGaussianEstimator(dim=3)",
    "num_shards": "num_shards must be an integer >= 1; found 0",
    "max_retries": "max_retries must be an integer >= 1; found 0",
    "unwritable": "/proc/mixle_mpi_cannot_write_here",
    "load_raises": "cannot parse measurements.dat line 7",
}
CODES = {"load_raises": 1}  # a user's own exception is a failure (1), not bad input (2)
# Every case at 4 ranks (where Open MPI used to hang); each kind of path also at 3 or 8:
# before the handshake (validation), after it (the shard store) and the user's own code.
MATRIX = [(case, 4) for case in sorted(CASES)] + [("num_shards", 3), ("nan", 8), ("load_raises", 8)]


def _launch(python: str, ranks: int, args: list[str], tmp_path: Path, timeout: float = 90):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    cmd = [
        python,
        "-m",
        "mixle_mpi",
        "run",
        "-n",
        str(ranks),
        "--timeout",
        str(timeout),
        "--",
        python,
        JOB,
        *args,
    ]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout + 30, cwd=str(tmp_path), env=env
    )


def assert_ended_cleanly(proc, code: int, needle: str, marker: str) -> None:
    """The job ended with ``code``, said ``needle`` once, showed no MPI_Abort banner and
    left no process behind."""
    assert proc.returncode == code, proc.stderr[-4000:]
    assert needle in proc.stderr, proc.stderr[-4000:]
    assert "driver reported" not in proc.stderr, proc.stderr[
        -4000:
    ]  # the launcher does not repeat the error
    assert "MPI_ABORT" not in proc.stderr and "MPI_Abort" not in proc.stderr, proc.stderr[-4000:]
    assert "UNEXPECTED" not in proc.stdout
    assert no_leftover_processes(marker) == []


# Every case under both libraries (each message is also checked without MPI, in the unit tests
# of the handle's validation).
@pytest.mark.parametrize("library, case, ranks", with_libraries(MATRIX))
def test_bad_input_is_a_clear_error(library, case, ranks, tmp_path):
    _, python = library
    proc = _launch(python, ranks, [case, str(tmp_path / "work")], tmp_path)
    assert_ended_cleanly(proc, CODES.get(case, 2), CASES[case], str(tmp_path / "work"))


def test_single_rank_is_refused(tmp_path):
    """Run without mpiexec (a singleton MPI world of one rank): no workers, a clear error."""
    proc = subprocess.run(
        [OMPI_PYTHON, JOB, "single", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=str(tmp_path),
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
    )
    assert proc.returncode == 2, proc.stderr[-4000:]
    assert "found 1 MPI rank but needs at least 2" in proc.stderr
    assert (
        "help-mpi-api" not in proc.stderr and "MPI_ABORT" not in proc.stderr
    )  # one line, not Open MPI's noise


def test_launcher_refuses_one_rank(tmp_path):
    proc = subprocess.run(
        [OMPI_PYTHON, "-m", "mixle_mpi", "run", "-n", "1", "--", sys.executable, JOB, "single"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 2
    assert "found -n 1 but needs at least 2 ranks" in proc.stderr


# 4 ranks and more is where it used to hang
@pytest.mark.parametrize("library, ranks", with_libraries([(4,), (8,)]))
def test_uncaught_exception_on_a_worker_aborts_the_job(library, ranks, tmp_path):
    _, python = library
    """Exit 1 at once, the first time: the workers' own error is no failed start (the
    launcher used to take it for one and launch the job again, to fail the same way)."""
    proc = _launch(python, ranks, ["worker_raises", str(tmp_path / "work")], tmp_path, timeout=60)
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert "user code failed on a worker rank" in proc.stderr
    assert "starting it again" not in proc.stderr, proc.stderr[-4000:]
    assert no_leftover_processes(str(tmp_path / "work")) == []


@pytest.mark.parametrize("library, ranks", with_libraries([(4,), (8,)]))
def test_uncaught_exception_on_the_driver_stops_every_rank(library, ranks, tmp_path):
    _, python = library
    proc = _launch(python, ranks, ["driver_raises", str(tmp_path / "work")], tmp_path, timeout=60)
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert "user code failed on the driver" in proc.stderr
    assert no_leftover_processes(str(tmp_path / "work")) == []


# -- the same through `mixle-mpi fit`, as a new user meets it --------------------------------
CSV = {
    "text.csv": "x,y\n1.0,2.0\n3.0,abc\n",
    "header_only.csv": "x,y\n",
    "empty.csv": "",
    "nan.csv": "x,y\n1.0,2.0\nnan,1.0\n",
    "blank.csv": "x,y\n1.0,2.0\n3.0,\n",
}
FIT_ERRORS = {
    # name: (--data, --model, extra args, what the message must say)
    "missing_file": ("nofile.csv", "gmm:k=2", [], "no such data file 'nofile.csv'"),
    "k0": ("builtin:iris", "gmm:k=0", ["--columns", "0:4"], "k must be an integer >= 1; found '0'"),
    "iris_no_columns": ("builtin:iris", "gmm:k=2", [], "Iris-setosa"),
    "text_cell": ("text.csv", "gmm:k=2", [], "abc"),
    "header_only": ("header_only.csv", "gmm:k=2", [], "header_only.csv"),
    "empty": ("empty.csv", "gmm:k=2", [], "empty.csv"),
    "nan": ("nan.csv", "gmm:k=2", [], "nan.csv"),
    "blank_cell": ("blank.csv", "gmm:k=2", [], "blank.csv"),
}
# A missing file at 3, 4 and 8 ranks under both MPIs; every other mistake at 4 under Open MPI
# (they take the same path, and each message is checked without MPI in test_unit_csv and
# test_unit_cli_inputs).
FIT_MATRIX = [
    pytest.param(
        lib.values[0], "missing_file", ranks, id=f"{lib.id}-missing_file-{ranks}", marks=lib.marks
    )
    for lib in LIBRARIES
    for ranks in (3, 4, 8)
] + [
    pytest.param(LIBRARIES[0].values[0], name, 4, id=f"openmpi-{name}-4")
    for name in sorted(FIT_ERRORS)
    if name != "missing_file"
]


@pytest.mark.parametrize("library, name, ranks", FIT_MATRIX)
def test_fit_input_errors_end_the_job_at_any_rank_count(library, name, ranks, tmp_path):
    _, python = library
    for fname, text in CSV.items():
        (tmp_path / fname).write_text(text)
    data, model, extra, needle = FIT_ERRORS[name]
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            python,
            "-m",
            "mixle_mpi",
            "fit",
            "-n",
            str(ranks),
            "--timeout",
            "90",
            "--data",
            data,
            "--model",
            model,
            *extra,
            "--out-dir",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=str(tmp_path),
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
    )
    assert_ended_cleanly(proc, 2, needle, str(out))
    assert "Traceback" not in proc.stderr


def test_a_model_too_large_for_memory_is_refused_with_the_estimate(tmp_path):
    """10,000 float64 columns and 40 full covariance matrices (29.8 GiB of parameters): exit 2
    before the data is read, with the estimate that ``--dry-run`` prints too; nothing is left
    running and no output is written."""
    import numpy as np

    np.save(tmp_path / "wide.npy", np.random.default_rng(0).normal(size=(40, 10_000)))
    args = [
        "--data",
        "wide.npy",
        "--model",
        "gmm:k=40,cov=full",
        "--num-shards",
        "2",
        "--out-dir",
        "out",
    ]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    dry = subprocess.run(
        [OMPI_PYTHON, "-m", "mixle_mpi", "fit", "-n", "3", "--dry-run", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
        env=env,
    )
    assert (
        dry.returncode == 2
        and "the driver would need about" in dry.stderr
        and "model 29.8 GB" in dry.stderr
    ), dry.stderr
    proc = subprocess.run(
        [OMPI_PYTHON, "-m", "mixle_mpi", "fit", "-n", "3", "--timeout", "90", *args],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=str(tmp_path),
        env=env,
    )
    assert_ended_cleanly(proc, 2, "the driver would need about", str(tmp_path / "out"))
    assert (
        "model 29.8 GB" in proc.stderr
        and "--no-memory-check" in proc.stderr
        and "Traceback" not in proc.stderr
    )
    assert (
        not (tmp_path / "out" / "model.json").exists()
        and not (tmp_path / "out" / "work" / "shards.h5").exists()
    )
