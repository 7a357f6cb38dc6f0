import functools
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


def _libraries():
    libs = [pytest.param(("openmpi", OMPI_PYTHON), id="openmpi")]
    mp = mpich_python()
    libs.append(pytest.param(("mpich", mp), id="mpich",
                             marks=pytest.mark.skipif(mp is None, reason="no MPICH environment (.venv-mpich or MIXLE_MPI_MPICH_PYTHON)")))
    return libs


LIBRARIES = _libraries()
