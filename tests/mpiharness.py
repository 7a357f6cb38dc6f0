"""Run real MPI jobs as subprocesses with deadlines, and compare their results exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OMPI_PYTHON = os.environ.get("MIXLE_MPI_OPENMPI_PYTHON", sys.executable)


def mpich_python() -> str | None:
    """The MPICH environment's interpreter (setup makes .venv-mpich), if there is one."""
    explicit = os.environ.get("MIXLE_MPI_MPICH_PYTHON")
    if explicit:
        return explicit
    candidate = REPO / ".venv-mpich" / "bin" / "python"
    return str(candidate) if candidate.exists() else None


@dataclass
class JobResult:
    rc: int
    stdout: str
    stderr: str
    result: dict | None
    events: list[dict]

    def describe(self) -> str:
        return f"rc={self.rc}\n--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-6000:]}"


def run_job(
    python: str,
    ranks: int,
    job_args: list[str],
    tmp: Path,
    *,
    plan: str | None = None,
    env: dict | None = None,
    timeout: float = 240,
    module: str = "mixle_mpi.fitting.fitjob",
    launch: tuple[str, ...] = (),
    workdir: Path | None = None,
) -> JobResult:
    """Launch ``python -m module job_args`` on ``ranks`` ranks through ``mixle-mpi run``
    (``launch``: more of its flags), from ``tmp``, with the job's work folder ``workdir``
    (default ``tmp/work``)."""
    tmp.mkdir(parents=True, exist_ok=True)
    out = tmp / "result.json"
    events = tmp / "events.jsonl"
    full_env = dict(os.environ)
    full_env.pop("MIXLE_MPI_FAULT_PLAN", None)
    full_env.update(
        {
            "MIXLE_MPI_EVENT_LOG": str(events),
            "MIXLE_MPI_HEARTBEAT_PERIOD": "0.1",
            "MIXLE_MPI_HEARTBEAT_TIMEOUT": "1.0",
            "MIXLE_MPI_DRIVER_TIMEOUT": "30",
            "MIXLE_MPI_RECONFIGURE_TIMEOUT": "20",
            "PYTHONWARNINGS": "ignore",
        }
    )
    if plan:
        full_env["MIXLE_MPI_FAULT_PLAN"] = plan
    full_env.update(env or {})
    cmd = [
        python,
        "-m",
        "mixle_mpi",
        "run",
        "-n",
        str(ranks),
        "--timeout",
        str(timeout),
        *launch,
        "--",
        python,
        "-m",
        module,
        *job_args,
        "--workdir",
        str(workdir or tmp / "work"),
    ]
    if module == "mixle_mpi.fitting.fitjob":
        cmd += ["--out", str(out), "--quiet"]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout + 60, cwd=str(tmp), env=full_env
    )
    result = json.loads(out.read_text()) if out.exists() else None
    evs = (
        [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
        if events.exists()
        else []
    )
    return JobResult(proc.returncode, proc.stdout, proc.stderr, result, evs)


def fit_args(
    model: str,
    n: int,
    shards: int | None,
    sub_chunks: int = 1,
    max_its: int = 6,
    seed: int = 7,
    max_retries: int = 2,
) -> list[str]:
    """The built-in job's arguments; ``shards=None`` leaves S to the default layout rule."""
    return [
        "--model",
        model,
        "--n",
        str(n),
        *([] if shards is None else ["--num-shards", str(shards)]),
        "--sub-chunks",
        str(sub_chunks),
        "--max-its",
        str(max_its),
        "--seed",
        str(seed),
        "--max-retries",
        str(max_retries),
    ]


def same_fit(a: dict, b: dict) -> bool:
    """Bit-identical: the model's exact JSON (floats in repr form) and every log-likelihood."""
    return a["model"] == b["model"] and a["ll"] == b["ll"] and a["iterations"] == b["iterations"]


def no_leftover_processes(marker: str) -> list[str]:
    """Processes whose command line still mentions ``marker`` (should be none after a job)."""
    out = subprocess.run(
        ["ps", "-eo", "pid,stat,args"], capture_output=True, text=True, timeout=30
    ).stdout
    return [line for line in out.splitlines() if marker in line and "ps -eo" not in line]


def wait_for_checkpoint(
    ck: Path, at_least: int, proc: subprocess.Popen, deadline: float = 120
) -> None:
    """Wait (bounded) until the running job ``proc`` checkpointed iteration ``at_least``."""
    from mixle_mpi.storage import checkpoint as ckpt

    end = time.monotonic() + deadline
    while time.monotonic() < end:
        assert proc.poll() is None, "the job ended before the test could interrupt it"
        try:
            state = ckpt.read(str(ck))
        except ckpt.CheckpointError:
            state = None
        if state is not None and state.iteration >= at_least:
            return
        time.sleep(0.05)
    raise AssertionError("no checkpoint appeared in time")
