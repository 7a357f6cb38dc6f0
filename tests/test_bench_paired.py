"""A small slice of ``bench/paired.py``: one job fits with mixle's handle and then with ours on
the same two processes, and the script reports their ratio. It checks that the benchmark
still runs end to end and that both fits did their iterations; no timing is asserted
(``bench/results/paired.json`` holds the committed figures)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mpiharness import no_leftover_processes

pytestmark = pytest.mark.mpijob

ROOT = Path(__file__).resolve().parent.parent


def test_one_paired_job_reports_a_ratio_of_two_complete_fits(tmp_path):
    out = tmp_path / "paired.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "paired.py"),
            "--jobs",
            "1",
            "--its",
            "5",
            "--models",
            "hmm",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["model"] for r in rows] == ["hmm"], proc.stdout[-2000:]
    (job,) = rows[0]["records"]
    assert job["ranks"] == 2 and job["driver_shards"] == [
        0
    ]  # ours: the driver computes one of 2 shards
    assert len(job["mixle_ms_per_it"]) == 2 and all(m > 0 for m in job["mixle_ms_per_it"])
    assert job["ours_ms_per_it"] > 0 and job["ratio"] == pytest.approx(
        job["ours_ms_per_it"] / job["mixle_ms_per_it"][1]
    )
    assert (
        no_leftover_processes(str(ROOT / "bench" / "_paired_job.py")) == []
    )  # the job's ranks, by their script
