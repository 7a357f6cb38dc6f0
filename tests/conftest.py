import functools
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mpiharness import OMPI_PYTHON, mpich_python  # noqa: E402
from reference_server import ERROR, REPLY  # noqa: E402
from slurmharness import cluster  # noqa: E402, F401 - the session's local SLURM (a fixture)

ENGINE_ENV = "MIXLE_MPI_ENGINE"
MPI_TIER = Path(__file__).resolve().parent / "mpi"


def pytest_ignore_collect(collection_path, config):
    """``tests/mpi`` runs only inside MPI (``mpiexec -n 3 python -m pytest --with-mpi
    tests/mpi``); the main run starts it under each MPI through ``test_mpi_tier.py``."""
    if Path(collection_path) == MPI_TIER and not config.getoption("with_mpi", False):
        return True
    return None


def _reference(
    model, n, shards, sub_chunks, max_its, seed, *, engine=None, mode="auto", mixles=False
):
    """For the engine the jobs run with (``MIXLE_MPI_ENGINE``, default seq), under numerics
    ``mode``. ``ShardsInProcess`` computes it; ``mixles``: mixle's own multiprocessing backend
    (engine seq only), which test_exactness checks the in-process reference against."""
    engine = engine or os.environ.get(ENGINE_ENV, "seq")
    assert not mixles or engine == "seq", "mixle's own backend has the seq engine only"
    return _reference_of(model, n, shards, sub_chunks, max_its, seed, engine, mode, mixles)


@functools.lru_cache(maxsize=None)
def _reference_of(model, n, shards, sub_chunks, max_its, seed, engine, mode, mixles):
    args = [model, n, 1, seed, shards, sub_chunks, max_its, None if mixles else engine]
    return _servers.ask(mode, args)


class ReferenceServers:
    """One ``reference_server`` process per numerics mode (core/numerics; a job's ranks are
    pinned to the baseline when their probes differ, as the tests' odd-CPU jobs do), started
    on first use and ended with the session; each answer within ``TIMEOUT`` seconds."""

    TIMEOUT = 900.0

    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen] = {}

    def _server(self, mode: str) -> subprocess.Popen:
        from mixle_mpi.core import jitcache, numerics

        proc = self.procs.get(mode)
        if proc is None or proc.poll() is not None:
            env = numerics.with_baseline({**os.environ, numerics.MODE_ENV: mode})
            jitcache.prime(env)  # loaded from numba's cache, as the jobs' ranks load them
            proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("reference_server.py"))],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            self.procs[mode] = proc
        return proc

    def ask(self, mode: str, args: list):
        import json
        import selectors

        proc = self._server(mode)
        proc.stdin.write(json.dumps(args) + "\n")
        proc.stdin.flush()
        deadline = time.monotonic() + self.TIMEOUT
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if not sel.select(timeout=deadline - time.monotonic()):
                    continue
                line = proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"the reference server ended (exit {proc.wait(30)})")
                if line.startswith(REPLY):
                    return json.loads(line[len(REPLY) :])
                if line.startswith(ERROR):
                    raise RuntimeError(
                        "the reference fit failed:\n" + json.loads(line[len(ERROR) :])
                    )
        proc.kill()
        raise TimeoutError(f"no reference within {self.TIMEOUT:.0f} s for {args}")

    def close(self) -> None:
        for proc in self.procs.values():
            proc.stdin.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        self.procs.clear()


_servers = ReferenceServers()


@pytest.fixture(scope="session")
def reference():
    """The reference fit of a parameter set (``_reference``), cached for the session."""
    yield _reference
    _servers.close()


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
