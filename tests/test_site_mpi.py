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
import queue
import shlex
import shutil
import signal
import subprocess
import threading
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
ITERATIONS = 30
ROWS = 200_000  # an iteration long enough that the fit outlasts the runtime ending a job at a death
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


def require(site: str) -> str:
    """``site``, or a skip saying why it cannot be tested here (a failure under CI)."""
    why = missing(site)
    if why:
        if REQUIRED:
            pytest.fail(f"MIXLE_MPI_REQUIRE_SITE_MPI=1 but {why}")
        pytest.skip(why)
    return site


@pytest.fixture(params=sorted(SITES))
def site(request):
    return require(request.param)


def modules(site: str) -> list[str]:
    """What loads the site's MPI: Lmod, its modulefiles, the module."""
    return [f"source {LMOD_INIT}", f"module use {MODULES}", f"module load site-{site}"]


def prologue(site: str) -> list[str]:
    """What a user's job script runs first: the module, then the shared environment."""
    return [*modules(site), f"source {venv(site)}/bin/activate"]


def fit_line(data: Path, out: Path) -> str:
    return (
        f"mixle-mpi fit --data {data} --model gmm:k=3 --num-shards 6 --max-its {ITERATIONS} "
        f"--delta none --seed 5 --out-dir {out}"
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    rng = np.random.default_rng(3)
    centers = np.array([[0.0, 0.0], [4.0, 1.0], [-3.0, 5.0]])
    x = centers[rng.integers(0, 3, ROWS)] + rng.normal(size=(ROWS, 2))
    path = tmp_path_factory.mktemp("data") / "x.npy"
    np.save(path, x)
    return path


def shell(lines: list[str], cwd: Path, env: dict | None = None) -> subprocess.Popen:
    """bash running ``lines`` in a session of its own, from a clean environment (as a login:
    no MPI on PATH but what the prologue loads); its output is read line by line."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "MIXLE_MPI"))}
    base["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    return subprocess.Popen(
        ["bash", "-c", "\n".join(["set -e", *lines])],
        cwd=str(cwd),
        env={**base, **ENV, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def follow(proc: subprocess.Popen, timeout: float, on_line=None) -> str:
    """The job's whole output once it ended within ``timeout`` (else it is killed and the test
    fails); ``on_line`` sees each line as it comes."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(x) for x in proc.stdout] + [lines.put(None)], daemon=True
    ).start()
    seen, end = [], time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.0, end - time.monotonic()))
        except queue.Empty:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            raise AssertionError(
                f"the job ran past {timeout} s:\n{''.join(seen)[-4000:]}"
            ) from None
        if line is None:
            proc.wait(timeout=30)
            return "".join(seen)
        seen.append(line)
        if on_line is not None:
            on_line(line)


def fitted(out: Path) -> tuple[str, list]:
    """The bits of a fit: the model's exact JSON and every log-likelihood."""
    summary = json.loads((out / "summary.json").read_text())
    return (out / "model.json").read_text(), summary["ll"]


class WorkerKill:
    """SIGKILLs world rank 1 of the fit writing to ``out``, from outside, when the fit reports
    iteration ``at`` (mid-fit); ``pid`` stays None if that never happened, and the test fails."""

    def __init__(self, out: Path, at: int = 3) -> None:
        self.out, self.at, self.pid = str(out), at, None

    def __call__(self, line: str) -> None:
        if self.pid is None and line.startswith(f"[fit] it {self.at}/"):
            for p in psutil.process_iter(["pid", "cmdline"]):
                cmd = p.info["cmdline"] or []
                if cmd and "python" in os.path.basename(cmd[0]) and self.out in " ".join(cmd):
                    if rank_number(p.pid) == 1:
                        p.kill()
                        self.pid = p.pid
                        return


@pytest.fixture(scope="module")
def clean(data, tmp_path_factory) -> tuple[str, list]:
    """The fit without a failure, under the site Open MPI (the bits every other run must give:
    they do not depend on the MPI, its ranks or its failures)."""
    require("openmpi")
    out = tmp_path_factory.mktemp("clean") / "out"
    proc = shell([*prologue("openmpi"), fit_line(data, out) + " -n 4 -q"], out.parent)
    log = follow(proc, 240)
    assert proc.returncode == 0, log[-4000:]
    return fitted(out)


def killed_run(site: str, data: Path, tmp_path: Path) -> tuple[str, WorkerKill]:
    """The fit with worker 1 SIGKILLed mid-fit, its MPI loaded by the job's own prologue
    (``--prologue``, the job-file key): the shell has no MPI on PATH before it."""
    out = tmp_path / "out"
    kill = WorkerKill(out)
    lines = shlex.quote("\n".join(modules(site)))
    proc = shell([f"{venv(site)}/bin/{fit_line(data, out)} -n 4 --prologue {lines}"], tmp_path)
    log = follow(proc, 300, kill)
    assert kill.pid is not None, f"the planned worker kill did not fire:\n{log[-4000:]}"
    assert proc.returncode == 0, f"worker {kill.pid} killed, exit {proc.returncode}:\n{log[-5000:]}"
    assert no_leftover_processes(str(out)) == []
    return log, kill


def test_a_fit_under_the_site_mpi_survives_a_worker_sigkill_to_the_same_bits(
    site, data, tmp_path, clean
):
    log, kill = killed_run(site, data, tmp_path)
    assert fitted(tmp_path / "out") == clean, log[-3000:]
    mpiexec = MODULES.parent / site / "bin" / "mpiexec"
    assert f"MPI: {SITES[site]}" in log and f"{mpiexec} (the first mpiexec on PATH" in log, log[
        :3000
    ]
    assert "--with-ft" not in log and "no ULFM here" in log, log[:3000]
    assert f"failure_detected rank 1 (pid {kill.pid}" in log, log[-4000:]
    assert "running it again" not in log and "failures survived 1" in log, log[-4000:]  # in the job


def test_an_mpiexec_that_cannot_outlive_a_death_resumes_to_the_same_bits(data, tmp_path, clean):
    """A site Open MPI whose mpiexec refuses --enable-recovery (a wrapper stands in for it):
    the death ends the job, and the launcher runs it again from its checkpoint."""
    require("openmpi")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mpiexec").write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do [ "$a" = --enable-recovery ] && { echo "mpiexec: unknown option $a" >&2; exit 1; }; done\n'
        f'exec {MODULES.parent / "openmpi" / "bin" / "mpiexec"} "$@"\n'
    )
    (bin_dir / "mpiexec").chmod(0o755)
    site = [*prologue("openmpi"), f"export PATH={bin_dir}:$PATH"]
    out = tmp_path / "out"
    kill = WorkerKill(out)
    proc = shell([*site, fit_line(data, out) + " -n 4"], tmp_path)
    log = follow(proc, 300, kill)
    assert kill.pid is not None, f"the planned worker kill did not fire:\n{log[-4000:]}"
    assert proc.returncode == 0, log[-5000:]
    assert "cannot outlive a rank's death" in log and "running it again to resume" in log, log[
        -4000:
    ]
    assert fitted(out) == clean


def test_the_slurm_template_with_a_modules_prologue_runs_under_the_site_mpi(
    site, data, tmp_path, clean, request
):
    from mixle_mpi.cli import slurm

    if shutil.which("sbatch") is None:
        why = "SLURM is not installed: scripts/install-slurm.sh installs it"
        pytest.fail(why) if REQUIRED else pytest.skip(why)
    cluster = request.getfixturevalue("cluster")

    out = tmp_path / "out"
    text = slurm.render(
        "ft",
        job_name=f"site-{site}",
        ntasks=3,
        time="10",
        signal_margin=60,
        max_requeues=0,
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
    assert fitted(out) == clean


def test_an_option_the_site_mpiexec_refuses_fails_at_once_and_is_not_retried(data, tmp_path):
    """Issue 48's first failure, on purpose: Open MPI 4.1's mpiexec refuses --with-ft. The
    launcher says so and ends with exit 2 after one attempt, not as a start to retry."""
    require("openmpi")
    out = tmp_path / "out"
    fit = fit_line(data, out) + " -n 2 --mpiexec-args='--with-ft ulfm'"
    proc = shell([*prologue("openmpi"), fit], tmp_path)
    log = follow(proc, 120)
    assert proc.returncode == 2, log[-3000:]
    assert "refused an option (" in log and '"--with-ft"' in log and "Not run again" in log, log
    assert log.count("launching:") == 1 and "starting it again" not in log, log
