import functools
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mpiharness import OMPI_PYTHON, mpich_python  # noqa: E402

MPI_TIER = Path(__file__).resolve().parent / "mpi"


def pytest_ignore_collect(collection_path, config):
    """``tests/mpi`` runs only inside MPI (``mpiexec -n 3 python -m pytest --with-mpi
    tests/mpi``); the main run starts it under each MPI through ``test_mpi_tier.py``."""
    if Path(collection_path) == MPI_TIER and not config.getoption("with_mpi", False):
        return True
    return None


@functools.lru_cache(maxsize=None)
def _reference(model, n, shards, sub_chunks, max_its, seed):
    from mixle_mpi.fitting.reference import reference_fit

    return reference_fit(model, n, 1, seed, shards, sub_chunks=sub_chunks, max_its=max_its)


@pytest.fixture(scope="session")
def reference():
    """mixle's own ResilientMPEncodedData fit (multiprocessing), cached per parameter set."""
    return _reference


@pytest.fixture(scope="session")
def uninterrupted_fit(tmp_path_factory):
    """The built-in job's failure-free fit on 4 ranks (S = 4, 8 iterations), cached per
    model and size for the whole session: checkpoint and failover tests compare with it."""
    from mpiharness import fit_args, run_job

    root = tmp_path_factory.mktemp("uninterrupted")

    @functools.lru_cache(maxsize=None)
    def fit(model: str, n: int) -> dict:
        job = run_job(OMPI_PYTHON, 4, fit_args(model, n, 4, 1, 8), root / f"ref-{model}-{n}")
        assert job.rc == 0, job.describe()
        return job.result

    return fit


def _libraries():
    libs = [pytest.param(("openmpi", OMPI_PYTHON), id="openmpi")]
    mp = mpich_python()
    libs.append(pytest.param(("mpich", mp), id="mpich",
                             marks=pytest.mark.skipif(mp is None, reason="no MPICH environment (.venv-mpich or MIXLE_MPI_MPICH_PYTHON)")))
    return libs


LIBRARIES = _libraries()

# CI runs every MPI-job case under Open MPI and, under MPICH, the cases whose path differs
# there (emulated shrink, spawn, fencing, startup) plus one of each size; the rest of the
# MPICH matrix repeats Open MPI's runs and keeps CI under 30 minutes on 2 cores.
# MIXLE_MPI_FULL_MATRIX=1 runs every case under both libraries.
FULL_MATRIX = os.environ.get("MIXLE_MPI_FULL_MATRIX", "") == "1"
FULL_ONLY = pytest.mark.skipif(not FULL_MATRIX, reason="full matrix only (MIXLE_MPI_FULL_MATRIX=1)")


def full_only(params, ids):
    """``params`` with those whose id is in ``ids`` run only with MIXLE_MPI_FULL_MATRIX=1."""
    return [pytest.param(*p.values, marks=[*p.marks, FULL_ONLY], id=p.id) if p.id in ids else p for p in params]


def with_libraries(rows, in_ci, id_of=lambda row: "-".join(str(v) for v in row)):
    """``pytest.param((library, python), *row)`` for every library and row; a case that
    ``in_ci(library_id, row)`` says no to runs only with MIXLE_MPI_FULL_MATRIX=1."""
    out = []
    for row in rows:
        for lib in LIBRARIES:
            marks = [*lib.marks, *([] if lib.id == "openmpi" or in_ci(lib.id, row) else [FULL_ONLY])]
            out.append(pytest.param(lib.values[0], *row, marks=marks, id=f"{id_of(row)}-{lib.id}"))
    return out
