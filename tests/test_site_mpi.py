"""A site's MPI, loaded as a module: Debian's Open MPI 4.1 and MPICH 4.0 stand in for a
cluster's, each with mpi4py compiled against it and this project installed without an MPI
extra (scripts/install-site-mpi.sh makes .venv-site-openmpi, .venv-site-mpich and an Lmod
modulefile for each). ``mixle-mpi fit -n 4`` runs in a shell that loaded the module: a worker
SIGKILLed from outside mid-fit costs nothing (exit 0, the clean run's bits), and the SLURM
template with a modules prologue runs the same fit on the local SLURM.

Where the script could not run (no root, no apt-get) these tests skip and say so; under CI
(``MIXLE_MPI_REQUIRE_SITE_MPI=1``, set by .ci/run) they fail instead.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from mpiharness import REPO, no_leftover_processes

from mixle_mpi.launch.reaper import rank_number

SITES = {"openmpi": "Open MPI 4.1", "mpich": "MPICH 4.0"}
MODULES = REPO / ".site-mpi" / "modules"
LMOD_INIT = "/usr/share/lmod/lmod/init/bash"
REQUIRED = os.environ.get("MIXLE_MPI_REQUIRE_SITE_MPI") == "1"
ITERATIONS = 12
ENV = {
    "PYTHONWARNINGS": "ignore",
    "MIXLE_MPI_HEARTBEAT_PERIOD": "0.1",
    "MIXLE_MPI_HEARTBEAT_TIMEOUT": "1.0",
    "MIXLE_MPI_DRIVER_TIMEOUT": "30",
    "MIXLE_MPI_RECONFIGURE_TIMEOUT": "20",
}

pytestmark = pytest.mark.mpijob


def venv(site: str) -> Path:
    return REPO / f".venv-site-{site}"


def missing(site: str) -> str | None:
    """Why the site MPI ``site`` cannot be tested here, or None."""
    if not (venv(site) / "bin" / "python").exists():
        return f"{venv(site).name} is missing: scripts/install-site-mpi.sh did not run (needs root and apt-get)"
    if not (MODULES / f"site-{site}").is_dir() or not os.path.exists(LMOD_INIT):
        return "the site MPI modulefiles or Lmod are missing: run scripts/install-site-mpi.sh"
    return None


@pytest.fixture(params=sorted(SITES))
def site(request):
    why = missing(request.param)
    if why:
        if REQUIRED:
            pytest.fail(f"MIXLE_MPI_REQUIRE_SITE_MPI=1 but {why}")
        pytest.skip(why)
    return request.param


def prologue(site: str) -> list[str]:
    """What a user's job script runs first: the module, then the shared environment."""
    return [
        f"source {LMOD_INIT}",
        f"module use {MODULES}",
        f"module load site-{site}",
        f"source {venv(site)}/bin/activate",
    ]


def fit_line(data: Path, out: Path) -> str:
    return (
        f"mixle-mpi fit --data {data} --model gmm:k=3 --num-shards 6 --max-its {ITERATIONS} "
        f"--delta none --seed 5 --out-dir {out}"
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    rng = np.random.default_rng(3)
    centers = np.array([[0.0, 0.0], [4.0, 1.0], [-3.0, 5.0]])
    x = centers[rng.integers(0, 3, 60000)] + rng.normal(size=(60000, 2))
    path = tmp_path_factory.mktemp("data") / "x.npy"
    np.save(path, x)
    return path


def shell(lines: list[str], cwd: Path) -> subprocess.Popen:
    """bash running ``lines`` in a session of its own (a clean environment, as a login)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "MIXLE_MPI"))}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"  # no MPI but the module's
    return subprocess.Popen(
        ["bash", "-c", "\n".join(["set -e", *lines])],
        cwd=str(cwd),
        env={**env, **ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen, timeout: float) -> str:
    try:
        return proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out = proc.communicate(timeout=30)[0]
        raise AssertionError(f"the job ran past {timeout} s:\n{out[-4000:]}") from None


def fitted(out: Path) -> tuple[str, list]:
    """The bits of a fit: the model's exact JSON and every log-likelihood."""
    summary = json.loads((out / "summary.json").read_text())
    return (out / "model.json").read_text(), summary["ll"]


def checkpointed(out: Path) -> int:
    from mixle_mpi.storage import checkpoint as ckpt

    try:
        state = ckpt.read(str(out / "checkpoint.h5"))
    except (ckpt.CheckpointError, OSError):
        return -1
    return -1 if state is None else state.iteration


def kill_a_worker(marker: str, proc: subprocess.Popen, out: Path, deadline: float = 120) -> int:
    """SIGKILL one worker rank (world rank 1) from outside once the fit has checkpointed
    iteration 2; returns its pid. Fails if the fit ended first: the fault must fire."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        assert proc.poll() is None, "the fit ended before the worker could be killed"
        if checkpointed(out) >= 2:
            for p in psutil.process_iter(["pid", "cmdline"]):
                cmd = " ".join(p.info["cmdline"] or [])
                if marker in cmd and "python" in cmd.split(" ")[0] and rank_number(p.pid) == 1:
                    p.kill()
                    return p.pid
        time.sleep(0.05)
    raise AssertionError("no worker rank to kill appeared in time")


def test_a_fit_under_the_site_mpi_survives_a_worker_sigkill_to_the_same_bits(site, data, tmp_path):
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    run = shell([*prologue(site), fit_line(data, clean) + " -n 4"], tmp_path)
    log = finish(run, 240)
    assert run.returncode == 0, log[-4000:]
    assert f"mixle-mpi run: MPI: {SITES[site]}" in log or f"MPI: {SITES[site]}" in log, log[-3000:]
    assert str(MODULES.parent / site / "bin" / "mpiexec") in log and "PATH" in log, log[-3000:]
    assert "--with-ft" not in log, log[-3000:]

    proc = shell([*prologue(site), fit_line(data, killed) + " -n 4"], tmp_path)
    victim = kill_a_worker(str(killed), proc, killed)
    log = finish(proc, 240)
    assert run.returncode == 0 and proc.returncode == 0, f"worker {victim} killed:\n{log[-5000:]}"
    assert fitted(killed) == fitted(clean), log[-3000:]
    assert no_leftover_processes(str(killed)) == []


def test_the_slurm_template_with_a_modules_prologue_runs_under_the_site_mpi(
    site, data, tmp_path, cluster
):
    from mixle_mpi.cli import slurm

    out = tmp_path / "out"
    text = slurm.render(
        "ft",
        job_name=f"site-{site}",
        ntasks=3,
        time="10",
        signal_margin=60,
        max_restarts=0,
        python="python3",
        fit_cmd=fit_line(data, out).replace("mixle-mpi fit", '"$PY" -m mixle_mpi fit'),
        prologue=prologue(site),
    )
    env = {k: v for k, v in cluster.env.items() if not k.startswith("VIRTUAL_ENV")}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    job = cluster.submit(text, tmp_path, "site", env={**env, **ENV})
    (rec,) = cluster.wait_done(job, deadline=180)
    log = "\n".join(p.read_text() for p in sorted(tmp_path.glob("*.out")))
    assert (rec["JobState"], rec["ExitCode"]) == ("COMPLETED", "0:0"), log[-5000:]
    assert f"MPI: {SITES[site]}" in log and shlex.quote(str(MODULES)) in text, log[-3000:]
    assert json.loads((out / "summary.json").read_text())["iterations"] == ITERATIONS
