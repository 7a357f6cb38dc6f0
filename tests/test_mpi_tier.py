"""The in-MPI tier (tests/mpi) under each MPI library, from the main test run.

``mpiexec -n 3 <python> -m pytest --with-mpi tests/mpi`` runs as a subprocess with a
deadline; this test fails, with the tier's output, when the tier fails, hangs, or ran no
test on some rank. Each rank reports its counts in a file (see tests/mpi/conftest.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import LIBRARIES

pytestmark = pytest.mark.mpijob

REPO = Path(__file__).resolve().parents[1]
RANKS = 3
DEADLINE = 240  # seconds for the whole tier (it takes well under a minute)


def _mpiexec(python: str) -> str:
    """mpiexec beside the environment's interpreter (the pip MPI wheels put it there)."""
    beside = Path(python).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec")
    if not found:
        pytest.fail(f"no mpiexec beside {python} or on PATH")
    return found


def _command(flavor: str, python: str) -> list[str]:
    from mixle_mpi.launch.launcher import MPICH, OPENMPI, build_command

    pytest_cmd = [
        python,
        "-m",
        "pytest",
        "-q",
        "-rs",
        "--color=no",
        "-p",
        "no:cacheprovider",
        "--with-mpi",
        "tests/mpi",
    ]
    if (
        flavor == "openmpi"
    ):  # what `mixle-mpi run` gives Open MPI: ULFM (so Comm.Shrink is tested), oversubscribe
        return build_command(_mpiexec(python), OPENMPI, RANKS, pytest_cmd)
    # MPICH without the rank wrapper of `mixle-mpi run`: it turns a rank killed by a signal
    # into exit 0, and here every rank's failure must count. Hydra's cleanup ends the others.
    assert flavor == MPICH
    return [_mpiexec(python), "-n", str(RANKS), *pytest_cmd]


def _run(cmd: list[str], env: dict) -> tuple[int | None, str, float]:
    """(exit code or None if it overran DEADLINE, output, seconds); a job that overran is
    killed with its whole process group."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=str(REPO),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=DEADLINE)
        return proc.returncode, out, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
        return None, out, time.monotonic() - t0


@pytest.mark.parametrize("library", LIBRARIES)
def test_the_in_mpi_tier_passes(library, tmp_path):
    flavor, python = library
    has = subprocess.run(
        [python, "-c", "import pytest, pytest_mpi"], capture_output=True, text=True, timeout=120
    )
    assert has.returncode == 0, (
        f"{python} has no pytest-mpi, which the in-MPI tier needs; rerun "
        f"`bash scripts/setup.sh --tests` (or `{python} -m pip install pytest-mpi`)\n{has.stderr}"
    )
    reports = tmp_path / "reports"
    reports.mkdir()
    env = dict(os.environ)
    env.pop("MIXLE_MPI_FAULT_PLAN", None)
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])]),
            "MIXLE_MPI_TIER_REPORT_DIR": str(reports),
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
    )
    cmd = _command(flavor, python)
    rc, out, seconds = _run(cmd, env)
    got = {p.name: json.loads(p.read_text()) for p in sorted(reports.glob("rank-*.json"))}
    said = f"{' '.join(cmd)}\nexit {rc} after {seconds:.1f} s; rank reports {got}\n--- output ---\n{out[-20000:]}"
    assert rc is not None, f"the in-MPI tier overran {DEADLINE} s and was killed\n{said}"
    assert rc == 0, f"the in-MPI tier failed\n{said}"
    assert sorted(got) == [f"rank-{r}.json" for r in range(RANKS)], (
        f"not every rank reported\n{said}"
    )
    for report in got.values():
        assert report["passed"] > 0, f"rank {report['rank']} ran no test\n{said}"
        assert report["failed"] == report["error"] == 0 and report["exitstatus"] == 0, said
