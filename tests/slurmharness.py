"""The local SLURM of the tests (scripts/slurm-local.sh): its client calls with deadlines,
and the session fixture that starts it and stops it. Shared by test_slurm and test_site_mpi:
the fixture is defined here once, so a session starts one SLURM whichever of them run."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from mpiharness import REPO

TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "PREEMPTED",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    env: dict

    def run(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=self.env)

    def submit(self, text: str, folder: Path, name: str, env: dict | None = None) -> str:
        """sbatch the script from ``folder`` (its output lands there); the job inherits ``env``."""
        folder.mkdir(parents=True, exist_ok=True)
        script = folder / f"{name}.sbatch"
        script.write_text(text)
        out = subprocess.run(
            ["sbatch", "--parsable", str(script)],
            capture_output=True,
            text=True,
            timeout=30,
            env={**self.env, **(env or {})},
            cwd=str(folder),
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.strip().split(";")[0]

    def jobs(self, job: str) -> list[dict]:
        """``scontrol -o show job`` as one dict per job (an array gives one per task)."""
        out = self.run("scontrol", "-o", "show", "job", job)
        return [
            dict(re.findall(r"(\w+)=(\S*)", line))
            for line in out.stdout.splitlines()
            if line.strip()
        ]

    def wait(self, job: str, until, deadline: float, what: str) -> list[dict]:
        end = time.monotonic() + deadline
        records: list[dict] = []
        while time.monotonic() < end:
            records = self.jobs(job)
            if records and until(records):
                return records
            time.sleep(0.2)
        raise AssertionError(
            f"job {job}: gave up after {deadline:.0f} s waiting for {what}; last seen {records}"
        )

    def wait_done(self, job: str, deadline: float = 120) -> list[dict]:
        def done(records):
            queued = self.run("squeue", "-h", "-j", job, "-o", "%i").stdout.strip()
            return not queued and all(r.get("JobState") in TERMINAL for r in records)

        return self.wait(job, done, deadline, "the end of the job")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("slurm")
    env = dict(
        os.environ,
        SLURM_CONF=str(state / "slurm.conf"),
        PYTHONWARNINGS="ignore",
        SLURM_LOCAL_CTLD_PORT=str(_free_port()),
        SLURM_LOCAL_SLURMD_PORT=str(_free_port()),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    )
    env.pop("MIXLE_MPI_FAULT_PLAN", None)
    script = str(REPO / "scripts" / "slurm-local.sh")
    up = subprocess.run(
        ["bash", script, "start", str(state)], capture_output=True, text=True, timeout=90, env=env
    )
    try:
        assert up.returncode == 0, f"could not start SLURM:\n{up.stdout}\n{up.stderr}"
        yield Cluster(env)
    finally:
        down = subprocess.run(
            ["bash", script, "stop", str(state)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert down.returncode == 0, f"could not stop SLURM:\n{down.stdout}\n{down.stderr}"
