"""Small slices of more benchmarks, so that they keep running end to end between the runs
whose figures are committed: ``bench/failure_cost.py`` (a real worker SIGKILLed mid-E-step
in each mode, the call split into its parts) and ``bench/scale_real.py`` (the driver's cost
per round against W). No timing is asserted; what is checked is that every planned kill
fired, every part was measured and every job ran (``bench/results/`` holds the figures).
Every other bench command at least imports and builds its parser, and those that need no
MPI job run at tiny sizes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fakehosts import available as fakehosts_missing
from mpiharness import no_leftover_processes
from slurmnodes import available as slurmnodes_missing

pytestmark = pytest.mark.mpijob

ROOT = Path(__file__).resolve().parent.parent


def _bench(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert no_leftover_processes(str(ROOT / "bench" / "_job.py")) == []
    assert no_leftover_processes(str(ROOT / "bench" / "_scale_job.py")) == []
    return proc


def test_the_failure_cost_benchmark_kills_a_worker_in_every_mode_and_splits_the_call():
    proc = _bench([str(ROOT / "bench" / "failure_cost.py"), "--quick", "--reps", "1"], timeout=400)
    out = proc.stdout
    figures = json.loads(out[out.index("\n[\n") + 1 :])
    failed = {f["name"].split("(")[1].split(";")[0]: f for f in figures if f["item"] == "2"}
    assert sorted(failed) == ["no respawn", "respawn", "spares=1"], out[-3000:]
    for mode, fig in failed.items():
        # n = 1: the job ran and its planned kill fired (a job whose kill did not fire is left out)
        assert fig["ratio"]["n"] == 1 and fig["values"][0] > 0, (
            mode,
            fig,
            proc.stderr[-4000:],
        )  # the bench log says why
        parts = fig["split_over_normal"]
        assert parts["detection"]["median"] > 0 and parts["recompute"]["median"] > 0, (mode, parts)
        assert fig["causes"], (mode, fig)
    idle = [f for f in figures if f["item"] == "11" and f["name"].startswith("failure-free")]
    assert len(idle) == 1 and idle[0]["ratio"]["n"] == 1, (
        figures,
        proc.stderr[-4000:],
    )  # the bench log says why


def test_the_scale_benchmark_measures_the_drivers_round_at_each_world_size(tmp_path):
    _bench(
        [
            str(ROOT / "bench" / "scale_real.py"),
            "--workers",
            "2,3",
            "--its",
            "4",
            "--reps",
            "1",
            "--idle-seconds",
            "0.5",
            "--results",
            str(tmp_path),
            "--name",
            "smoke",
        ],
        timeout=300,
    )
    record = json.loads((tmp_path / "smoke.json").read_text())
    assert (tmp_path / "smoke.md").exists()
    per = record["per_workers"]
    assert sorted(per) == ["2", "3"], per
    for w, row in per.items():
        assert row["reps_ok"] == row["reps"] == 1, (w, row)
        assert row["driver_cpu_per_round"] > 0 and row["poll_passes_per_round"] > 0, (w, row)
        assert row["beats_per_s_idle"] > 0 and row["estep_round_latency"] > 0, (w, row)
    assert per["2"]["ratios"]["driver_cpu_per_round"] == 1.0  # the baseline is the smallest W
    assert all(job["launcher_rc"] == 0 for job in record["jobs"]), record["jobs"]


def test_the_straggler_benchmark_runs_a_clean_and_a_slow_fit_with_the_same_bits(tmp_path):
    """bench/stragglers.py --smoke: a clean fit and one with worker 2 four times slower, both
    with speculation; the slow one copied and moved shards, and every log likelihood is the
    clean run's."""
    out = tmp_path / "stragglers.json"
    _bench([str(ROOT / "bench" / "stragglers.py"), "--smoke", "--out", str(out)], timeout=300)
    assert no_leftover_processes(str(ROOT / "bench" / "_slow_job.py")) == []
    runs = json.loads(out.read_text())["runs"]
    clean, slow = (next(r for r in runs if r["k"] == k) for k in (1.0, 4.0))
    assert slow["lls"] == clean["lls"] and len(clean["lls"]) == 8, (clean["lls"], slow["lls"])
    assert clean["copies"] == clean["moves"] == 0 and slow["won"] > 0 and slow["moves"] > 0, runs
    assert slow["failures"] == clean["failures"] == 0, runs


@pytest.mark.skipif(bool(fakehosts_missing()), reason=fakehosts_missing() or "ok")
def test_the_host_loss_benchmark_splits_the_time_a_lost_host_costs(tmp_path):
    """bench/host_loss.py, one run under Open MPI: host C lost mid-fit, the job relaunched
    without it to the failure-free bits, and every part of the time measured."""
    out = tmp_path / "host_loss.json"
    _bench(
        [
            str(ROOT / "bench" / "host_loss.py"),
            "--reps",
            "1",
            "--libraries",
            "openmpi",
            "--out",
            str(out),
        ],
        timeout=300,
    )
    report = json.loads(out.read_text())
    (row,) = report["rows"]
    assert row["ok"] and row["identical"], row
    assert (
        all(row[k] >= 0 for k in ("detection", "teardown", "probe", "relaunch", "reload"))
        and row["total"] > 0
    ), row


@pytest.mark.skipif(bool(slurmnodes_missing()), reason=slurmnodes_missing() or "ok")
def test_the_node_loss_benchmark_runs_a_clean_and_a_lost_node_job_on_three_slurm_nodes(tmp_path):
    """bench/node_loss_slurm.py, one small case: the srun template over 3 local SLURM nodes,
    once clean and once with node2 lost mid-fit; both COMPLETED with the same bits, and the
    loss was detected and recovered in the job."""
    out = tmp_path / "node_loss.json"
    _bench(
        [
            str(ROOT / "bench" / "node_loss_slurm.py"),
            "--cases",
            "srun-openmpi",
            "--its",
            "60",
            "--rows",
            "200000",
            "--out",
            str(out),
        ],
        timeout=400,
    )
    (row,) = json.loads(out.read_text())["rows"]
    assert row["ok"] and row["identical"] and not row["relaunched"], row
    assert 0 < row["detection"] <= row["recovery"], row


def test_the_load_soak_counts_no_false_detection_beside_a_cpu_and_a_memory_hog(tmp_path):
    """bench/load_soak.py, one tiny case: a 6 s soak under Open MPI beside a CPU hog and a
    small memory hog; the job ends 0 with rounds done, nothing failed or blacklisted, and
    the hogs are gone."""
    _bench(
        [
            str(ROOT / "bench" / "load_soak.py"),
            "--seconds",
            "6",
            "--kills",
            "0",
            "--libs",
            "openmpi",
            "--cpu-hogs",
            "1",
            "--mem-gib",
            "0.05",
            "--work-dir",
            str(tmp_path / "work"),
            "--results",
            str(tmp_path),
        ],
        timeout=300,
    )
    row = json.loads((tmp_path / "load_soak_openmpi_smoke.json").read_text())
    soak = row["soak"]
    assert soak["exit_code"] == 0 and soak["rounds"] > 0, soak
    assert soak["failure_detected"] == soak["blacklisted"] == 0, soak
    assert "Smoke run" in (tmp_path / "load_soak_smoke.md").read_text()
    assert no_leftover_processes("mixle-mpi-load-hog") == [], "a hog outlived the run"


# the helpers that a benchmark starts (no flags of their own) and the module they share
NOT_COMMANDS = {"__init__.py", "common.py", "payload.py", "memory_startup.py"}
PARSERS = """
import contextlib, io, runpy, sys
for path in sys.argv[1:]:
    sys.argv = [path, "--help"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_path(path, run_name="__main__")
            code = "ran without exiting"
        except SystemExit as e:
            code = e.code
    print(path, code, out.getvalue().startswith("usage:"))
"""


def test_every_bench_script_imports_and_builds_its_parser():
    """Every command of bench/ (not the helpers it starts) imports what it needs and
    answers --help: a renamed module or option breaks it here, not at its next run."""
    scripts = sorted(
        str(p)
        for p in (ROOT / "bench").glob("*.py")
        if not p.name.startswith("_") and p.name not in NOT_COMMANDS
    )
    proc = subprocess.run(
        [sys.executable, "-c", PARSERS, *scripts],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    answers = [line.rsplit(" ", 2) for line in proc.stdout.splitlines() if line.startswith("/")]
    assert [a[0] for a in answers] == scripts, proc.stdout
    assert all(a[1:] == ["0", "True"] for a in answers), proc.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["scale_sim.py", "--sizes", "4:8", "--reps", "20"],
        ["wakeup.py", "--trips", "50"],
        ["csv_memory.py", "--rows", "2000", "--reps", "1"],
    ],
    ids=lambda a: a[0],
)
def test_the_benchmarks_without_mpi_run_at_tiny_sizes(args, tmp_path):
    """The benchmarks that need no MPI job run end to end at tiny sizes and write their
    report (the figures themselves are noise at these sizes)."""
    out = tmp_path / "out"
    _bench([str(ROOT / "bench" / args[0]), *args[1:], "--out", str(out)], timeout=300)
    assert out.exists() and out.stat().st_size > 0
