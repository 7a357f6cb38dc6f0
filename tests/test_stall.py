"""A worker whose main thread is stuck while its heartbeat thread lives on (a deadlock in a C
extension, a livelock) is failed and recovered from; a long but healthy E-step is not.

The ``hang`` fault blocks the victim's main thread in a C-level lock wait: the GIL is free,
so its heartbeats go on and only the progress it reports stands still.
"""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
from conftest import LIBRARIES
from mpiharness import OMPI_PYTHON, fit_args, no_leftover_processes, run_job, same_fit

from mixle_mpi.chaos.fault_plan import read_fired, unfired

pytestmark = pytest.mark.mpijob
MODEL, N, SHARDS, SUB, ITS = "gmm1d", 6000, 4, 2, 5


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_hung_main_thread_is_detected_and_recovered_to_the_same_bits(
    library, tmp_path, reference
):
    _, python = library
    plan = "2:hang:estep_before:1"
    fault_log = tmp_path / "fired.jsonl"
    job = run_job(
        python,
        4,
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path,
        plan=plan,
        timeout=180,
        env={"MIXLE_MPI_STALL_TIMEOUT": "2", "MIXLE_MPI_FAULT_LOG": str(fault_log)},
    )
    assert unfired(plan, read_fired(str(fault_log))) == [], job.describe()
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    causes = [e["cause"] for e in job.events if e["event"] == "failure_detected"]
    assert len(causes) == 1 and causes[0].startswith("stalled: "), causes
    assert no_leftover_processes(str(tmp_path)) == []


def test_a_long_healthy_estep_is_not_taken_for_a_stall(tmp_path):
    """Each worker's E-step lasts longer than the heartbeat timeout and the stall timeout;
    it reports progress after every sub-chunk, so nobody is failed."""
    data = tmp_path / "x.npy"
    np.save(data, np.random.RandomState(0).normal(size=(160000, 40)))
    stall = 1.0  # as the heartbeat timeout: the E-step below must outlast both, on any machine
    env = dict(os.environ, PYTHONWARNINGS="ignore", MIXLE_MPI_STALL_TIMEOUT=str(stall))
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            OMPI_PYTHON,
            "-m",
            "mixle_mpi",
            "fit",
            "-n",
            "3",
            "--timeout",
            "240",
            "--data",
            str(data),
            "--model",
            "gmm:k=30,cov=full",
            "--num-shards",
            "2",
            "--sub-chunks",
            "8",
            "--max-its",
            "3",
            "--out-dir",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(tmp_path),
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [
        json.loads(line) for line in (out / "events.jsonl").read_text().splitlines() if line.strip()
    ]
    assert not [e for e in events if e["event"] == "failure_detected"], proc.stderr[-3000:]
    assert not (out / "work" / "shards.h5").exists(), (
        "a finished fit keeps no copy of the data without --keep-store"
    )
    summary = json.loads((out / "summary.json").read_text())
    per_it = summary["wall_seconds"] / summary["iterations"]
    assert per_it > 1.2 * stall, (
        f"the E-step took {per_it:.2f} s per iteration: too short to prove anything"
    )


def test_a_driver_blocked_for_good_outside_mpi_ends_with_74_and_the_launcher_resumes_it(tmp_path):
    """The driver's main thread blocks in a callback that never returns (as on a hung file
    system) while its heartbeat thread beats on: the watchdog sees the main thread neither
    passing its loops nor computing, and ends the attempt with 74 within its limit
    (reconfigure_timeout + 30 s); the launcher runs it again, which resumes from the
    checkpoint (the block was at iteration 3, before its resumption point) to the bits of a
    run that never blocked; nothing is left running."""
    import time

    from mpiharness import REPO

    job = str(REPO / "tests" / "jobs" / "blocked_callback.py")
    env = dict(os.environ, PYTHONWARNINGS="ignore", MIXLE_MPI_RECONFIGURE_TIMEOUT="4")
    env.pop("MIXLE_MPI_FAULT_PLAN", None)

    def launch(ck, mode):
        return subprocess.run(
            [
                OMPI_PYTHON,
                "-m",
                "mixle_mpi",
                "run",
                "-n",
                "3",
                "--timeout",
                "150",
                "--",
                OMPI_PYTHON,
                job,
                str(tmp_path / ck),
                str(tmp_path / f"work-{ck}"),
                mode,
            ],
            capture_output=True,
            text=True,
            timeout=200,
            cwd=str(tmp_path),
            env=env,
        )

    t0 = time.monotonic()
    blocked = launch("ck.h5", "block")
    took = time.monotonic() - t0
    text = blocked.stdout[-2000:] + blocked.stderr[-4000:]
    assert blocked.returncode == 0, text
    assert "BLOCKING at iteration 3" in blocked.stdout
    assert "(exit 74): the driver's main thread made no progress for" in blocked.stderr, text
    assert (
        "computed nothing meanwhile" in blocked.stderr
        and "running it again to resume" in blocked.stderr
    ), text
    assert "resumed" in blocked.stderr and took < 120, (
        took,
        text,
    )  # the watchdog ended it, not --timeout
    assert no_leftover_processes(str(tmp_path)) == []
    clean = launch("clean.h5", "go")
    assert clean.returncode == 0, clean.stderr[-3000:]
    done = [line for line in blocked.stdout.splitlines() if line.startswith("DONE")]
    assert done and done == [line for line in clean.stdout.splitlines() if line.startswith("DONE")]
