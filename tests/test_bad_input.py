"""Bad input ends fast on the driver with a clear message and a nonzero exit, never a hang."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LIBRARIES
from mpiharness import OMPI_PYTHON, REPO, no_leftover_processes

pytestmark = pytest.mark.mpijob
JOB = str(REPO / "tests" / "jobs" / "bad_input.py")

CASES = {
    "empty": "data is empty",
    "too_few": "found 3 observations but num_shards=8",
    "nan": "NaN",
    "ragged": "has shape (2,), expected (3,)",
    "mismatch": "does not match the data",
    "num_shards": "num_shards must be an integer >= 1; found 0",
    "max_retries": "max_retries must be an integer >= 1; found 0",
    "unwritable": "/proc/mixle_mpi_cannot_write_here",
}


def _launch(python: str, ranks: int, args: list[str], tmp_path: Path, timeout: float = 90):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    cmd = [python, "-m", "mixle_mpi", "run", "-n", str(ranks), "--timeout", str(timeout), "--", python, JOB, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30, cwd=str(tmp_path), env=env)


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_a_clear_error(library, case, tmp_path):
    _, python = library
    proc = _launch(python, 3, [case, str(tmp_path / "work")], tmp_path)
    assert proc.returncode == 2, proc.stderr[-4000:]
    assert CASES[case] in proc.stderr, proc.stderr[-4000:]
    assert "UNEXPECTED" not in proc.stdout
    assert no_leftover_processes(str(tmp_path / "work")) == []


def test_single_rank_is_refused(tmp_path):
    """Run without mpiexec (a singleton MPI world of one rank): no workers, a clear error."""
    proc = subprocess.run([OMPI_PYTHON, JOB, "single", str(tmp_path / "work")], capture_output=True, text=True,
                          timeout=90, cwd=str(tmp_path), env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert proc.returncode == 2, proc.stderr[-4000:]
    assert "found 1 MPI rank but needs at least 2" in proc.stderr


def test_launcher_refuses_one_rank(tmp_path):
    proc = subprocess.run([OMPI_PYTHON, "-m", "mixle_mpi", "run", "-n", "1", "--", sys.executable, JOB, "single"],
                          capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert proc.returncode == 2
    assert "found -n 1 but needs at least 2 ranks" in proc.stderr


@pytest.mark.parametrize("library", LIBRARIES)
def test_uncaught_exception_on_a_worker_aborts_the_job(library, tmp_path):
    _, python = library
    proc = _launch(python, 3, ["worker_raises", str(tmp_path / "work")], tmp_path, timeout=60)
    assert proc.returncode != 0
    assert "user code failed on a worker rank" in proc.stderr
    assert no_leftover_processes(str(tmp_path / "work")) == []


@pytest.mark.parametrize("library", LIBRARIES)
def test_uncaught_exception_on_the_driver_stops_every_rank(library, tmp_path):
    _, python = library
    proc = _launch(python, 3, ["driver_raises", str(tmp_path / "work")], tmp_path, timeout=60)
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert "user code failed on the driver" in proc.stderr
    assert no_leftover_processes(str(tmp_path / "work")) == []
