"""A worker starved of CPU is suspected, not failed (policy/suspicion.py): a real worker
process under mpiexec is throttled to 1 ms of CPU a second through a CPU cgroup (as a loaded
node or a noisy neighbour would starve it: runnable, silent) until the driver suspects it,
and a second more. Its heartbeats stop; the driver looks at its process, sees it alive and
runnable, waits, hears it again and clears the suspicion. Nothing is fenced and the bits are the failure-free run's."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from conftest import LIBRARIES
from mpiharness import fit_args, no_leftover_processes, run_job, same_fit

pytestmark = pytest.mark.mpijob
# sub-chunks of 7,500 rows; no speculation, so that the round waits for the starved worker
MODEL, N, SHARDS, SUB, ITS = "gmm1d", 120_000, 4, 4, 60
CPU_CGROUPS = (Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup"))  # v1 cpu controller, or v2


def _cgroup_root() -> Path | None:
    for root in CPU_CGROUPS:
        if (root / "cgroup.procs").exists() and os.access(root, os.W_OK):
            v2 = (root / "cgroup.controllers").exists()
            if not v2 or "cpu" in (root / "cgroup.controllers").read_text().split():
                return root
    return None


ROOT = _cgroup_root()


class Throttle:
    """A CPU cgroup of this test's own that lets its members run 1 ms per second."""

    def __init__(self, name: str) -> None:
        self.dir = ROOT / name
        self.dir.mkdir(exist_ok=True)
        if (self.dir / "cpu.max").exists():
            (self.dir / "cpu.max").write_text("1000 1000000")
        else:
            (self.dir / "cpu.cfs_period_us").write_text("1000000")
            (self.dir / "cpu.cfs_quota_us").write_text("1000")

    def hold(self, pid: int, until, most: float) -> None:
        """Throttle ``pid`` until ``until()`` is true, then one second more (``most`` at most)."""
        (self.dir / "cgroup.procs").write_text(str(pid))
        end = time.monotonic() + most
        while not until() and time.monotonic() < end:
            time.sleep(0.05)
        time.sleep(min(1.0, max(0.0, end - time.monotonic())))
        (ROOT / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        for pid in (self.dir / "cgroup.procs").read_text().split():
            (ROOT / "cgroup.procs").write_text(pid)
        self.dir.rmdir()


def _events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _starve_worker_two(events: Path, throttle: Throttle, done: threading.Event, out: dict) -> None:
    """Once the workers hold their shards, starve worker 2 until the driver suspects it."""
    deadline = time.monotonic() + 120
    while not done.is_set() and time.monotonic() < deadline:
        evs = _events(events)
        if any(e["event"] == "loaded" for e in evs):
            ranks = next(e for e in evs if e["event"] == "ranks")
            out["pid"] = int(str(ranks["ranks"]["2"]).rsplit(":", 1)[1])

            def suspected() -> bool:
                return any(e["event"] == "suspected" for e in _events(events)) or done.is_set()

            throttle.hold(out["pid"], suspected, most=15.0)
            out["held"] = True
            return
        time.sleep(0.02)


@pytest.mark.skipif(
    ROOT is None, reason="no writable CPU cgroup to throttle a worker in (root needed)"
)
@pytest.mark.parametrize("library", LIBRARIES)
def test_a_starved_worker_is_suspected_then_cleared_and_nothing_is_fenced(
    library, tmp_path, reference
):
    name, python = library
    throttle = Throttle(f"mixle-mpi-test-{os.getpid()}-{name}")
    done, out = threading.Event(), {}
    starver = threading.Thread(
        target=_starve_worker_two, args=(tmp_path / "events.jsonl", throttle, done, out)
    )
    starver.start()
    try:
        job = run_job(
            python,
            4,
            fit_args(MODEL, N, SHARDS, SUB, ITS),
            tmp_path,
            timeout=180,
            env={"MIXLE_MPI_SPECULATION": "0"},
        )
    finally:
        done.set()
        starver.join(timeout=30)
        throttle.remove()
    assert out.get("held"), ("the starvation never happened", job.describe())
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    kinds = [(e["event"], e.get("worker")) for e in job.events]
    assert not [k for k in kinds if k[0] == "failure_detected"], job.describe()
    assert ("suspected", 2) in kinds and ("suspicion_cleared", 2) in kinds, kinds
    assert no_leftover_processes(str(tmp_path)) == []
