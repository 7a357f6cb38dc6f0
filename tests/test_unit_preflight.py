"""Errors before launch: every problem of a fit's model and data at once, each with its fix,
in a fraction of a second and without MPI (cli/preflight.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from mixle_mpi.cli import preflight
from mixle_mpi.cli.jobconfig import resolve
from mixle_mpi.core.errors import ConfigError, DataError


def _cfg(**values):
    return resolve(None, {"checkpoint": "none", **values})


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with h5py.File("measurements.h5", "w") as f:
        f["/run1/X"] = np.zeros((100, 3))
    (tmp_path / "iris.csv").write_text("a,b,species\n1,2,setosa\n3,4,versicolor\n")
    return tmp_path


def test_a_typo_in_the_path_and_a_bad_model_are_reported_together(folder):
    found = preflight.check(_cfg(data="mesurements.h5:/run1/X", model="gmm:kk=3"))
    assert len(found.problems) == 2
    assert "no parameter 'kk'" in found.problems[0]
    assert "did you mean 'measurements.h5'?" in found.problems[1]
    with pytest.raises(ConfigError, match="2 problems"):
        found.raise_any()


def test_a_text_column_suggests_the_columns_to_keep(folder):
    found = preflight.check(_cfg(data="iris.csv", model="gmm:k=3"))
    (problem,) = found.problems
    assert "found 'setosa'" in problem and "--columns 0:2" in problem
    with pytest.raises(DataError):  # a single problem keeps its own type
        found.raise_any()
    assert preflight.check(_cfg(data="iris.csv", model="gmm:k=3", columns="0:2")).problems == []


def test_a_missing_dataset_lists_the_datasets(folder):
    (problem,) = preflight.check(_cfg(data="measurements.h5:/run1/Y", model="gmm:k=3")).problems
    assert "/run1/X" in problem


def test_a_good_fit_has_no_problem_and_its_shape(folder):
    found = preflight.check(_cfg(data="measurements.h5:/run1/X", model="gmm:k=3,cov=full"))
    assert found.problems == [] and found.shape.rows == 100 and found.shape.ncols == 3


def test_fit_n_exits_2_before_mpi_starts_naming_every_problem(folder):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mixle_mpi",
            "fit",
            "-n",
            "4",
            "--data",
            "mesurements.h5:/run1/X",
            "--model",
            "gmm:kk=3",
            "--out-dir",
            "out",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=folder,
    )
    assert proc.returncode == 2, proc.stderr
    assert "2 problems" in proc.stderr and "did you mean 'measurements.h5'?" in proc.stderr
    assert "mpiexec" not in proc.stderr and not os.path.exists(
        folder / "out"
    )  # no MPI, no folder left
