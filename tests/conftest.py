import functools
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mpiharness import OMPI_PYTHON, mpich_python  # noqa: E402
from slurmharness import cluster  # noqa: E402, F401 - the session's local SLURM (a fixture)

ENGINE_ENV = "MIXLE_MPI_ENGINE"
MPI_TIER = Path(__file__).resolve().parent / "mpi"


def pytest_ignore_collect(collection_path, config):
    """``tests/mpi`` runs only inside MPI (``mpiexec -n 3 python -m pytest --with-mpi
    tests/mpi``); the main run starts it under each MPI through ``test_mpi_tier.py``."""
    if Path(collection_path) == MPI_TIER and not config.getoption("with_mpi", False):
        return True
    return None


def _reference(model, n, shards, sub_chunks, max_its, seed, *, engine=None, mode="auto"):
    """For the engine the jobs run with (``MIXLE_MPI_ENGINE``, default seq: mixle's own
    backend), so the exactness and chaos tests run for any engine; under numerics ``mode``."""
    engine = engine or os.environ.get(ENGINE_ENV, "seq")
    return _reference_of(model, n, shards, sub_chunks, max_its, seed, engine, mode)


@functools.lru_cache(maxsize=None)
def _reference_of(model, n, shards, sub_chunks, max_its, seed, engine, mode="auto"):
    """mixle's own fit (engine seq) or ``ShardsInProcess`` with the engine, in a process of
    its own under numerics ``mode`` (core/numerics; a job's ranks are pinned to the baseline
    when their probes differ, as the tests' odd-CPU jobs do): numpy picks its SIMD kernels
    when imported, so this process cannot."""
    import json
    import subprocess

    from mixle_mpi.core import jitcache, numerics

    code = (
        "import json, sys; from mixle_mpi.fitting.reference import reference_fit; "
        "a = json.loads(sys.argv[1]); print(json.dumps(reference_fit(*a[:7], engine=a[7])))"
    )
    args = json.dumps(
        [model, n, 1, seed, shards, sub_chunks, max_its, None if engine == "seq" else engine]
    )
    env = numerics.with_baseline({**os.environ, numerics.MODE_ENV: mode})
    jitcache.prime(env)  # loaded from numba's cache, as the jobs' ranks load them
    out = subprocess.run(
        [sys.executable, "-c", code, args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    return json.loads(out.stdout.splitlines()[-1])


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
    libs.append(
        pytest.param(
            ("mpich", mp),
            id="mpich",
            marks=pytest.mark.skipif(
                mp is None, reason="no MPICH environment (.venv-mpich or MIXLE_MPI_MPICH_PYTHON)"
            ),
        )
    )
    return libs


LIBRARIES = _libraries()

# Every MPI-job case runs under both libraries, in CI too: no case waits behind a flag.


def with_libraries(rows, id_of=lambda row: "-".join(str(v) for v in row)):
    """``pytest.param((library, python), *row)`` for every library and row."""
    return [
        pytest.param(lib.values[0], *row, marks=lib.marks, id=f"{id_of(row)}-{lib.id}")
        for row in rows
        for lib in LIBRARIES
    ]
