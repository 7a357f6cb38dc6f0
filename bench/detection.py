"""Detection latency: from a real SIGKILL (or SIGSTOP) of a worker to the driver's decision.

The worker's chaos hook stamps the wall time right before it signals itself; the driver's
``failure_detected`` event carries the wall time of the decision (same host, same clock).
Runs Open MPI (ULFM errors + heartbeats) and MPICH (heartbeats only), interleaved.

    python bench/detection.py [--reps 5] [--period 0.1] [--timeout 1.0] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from mixle_mpi.chaos.fault_plan import read_fired  # noqa: E402


def one_run(
    python: str,
    action: str,
    period: float,
    timeout: float,
    workers: int = 3,
    victim: int = 2,
    extra_env: dict | None = None,
    rows: int = 20000,
    max_its: int = 4,
) -> dict:
    """One job of ``workers`` workers (one shard each) whose worker ``victim`` signals itself
    with ``action`` before its second E-step; the latency from that stamp to the decision."""
    with tempfile.TemporaryDirectory(prefix="mixle_mpi_detect_") as tmp:
        events, fired = os.path.join(tmp, "events.jsonl"), os.path.join(tmp, "fired.jsonl")
        env = dict(
            os.environ,
            PYTHONWARNINGS="ignore",
            MIXLE_MPI_EVENT_LOG=events,
            MIXLE_MPI_FAULT_LOG=fired,
            PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            MIXLE_MPI_FAULT_PLAN=f"{victim}:{action}:estep_before:2",
            MIXLE_MPI_HEARTBEAT_PERIOD=str(period),
            MIXLE_MPI_HEARTBEAT_TIMEOUT=str(timeout),
            **(extra_env or {}),
        )
        cmd = [
            python,
            "-m",
            "mixle_mpi",
            "run",
            "-n",
            str(workers + 1),
            "--timeout",
            str(180 + 10 * workers),
            "--",
            python,
            "-m",
            "mixle_mpi.fitting.fitjob",
            "--n",
            str(rows),
            "--num-shards",
            str(workers),
            "--max-its",
            str(max_its),
            "--quiet",
            "--workdir",
            os.path.join(tmp, "work"),
        ]
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=240 + 12 * workers, env=env
        )
        stamp = read_fired(
            fired
        )  # the victim records the fault, with its time, just before it acts
        detected = (
            [json.loads(line) for line in open(events) if '"failure_detected"' in line]
            if os.path.exists(events)
            else []
        )
        if proc.returncode != 0 or not stamp or not detected:
            return {"ok": False, "rc": proc.returncode, "stderr": proc.stderr[-2000:]}
        ev = detected[0]
        return {
            "ok": True,
            "latency_ms": (ev["detected_at"] - stamp[0]["time"]) * 1000.0,
            "cause": ev["cause"].split(":")[0],
            "detail": ev["cause"],
            "worker": ev.get("worker"),
        }


def measure(libs: list[tuple[str, str]], reps: int, period: float, timeout: float) -> list[dict]:
    """Interleaved runs: for each rep, each (library, python) and each of kill/stop."""
    rows: dict[tuple, list] = {}
    for _ in range(reps):
        for lib, python in libs:
            for action in ("kill", "stop"):
                rows.setdefault((lib, action), []).append(one_run(python, action, period, timeout))
    return [
        {
            "mpi": lib,
            "action": action,
            "latencies_ms": [r["latency_ms"] for r in runs if r["ok"]],
            "causes": sorted({r["cause"] for r in runs if r["ok"]}),
            "failed": [r for r in runs if not r["ok"]],
        }
        for (lib, action), runs in rows.items()
    ]


def command(python: str, action: str, period: float, timeout: float) -> str:
    """The exact command of one detection run (for the report)."""
    return (
        f"MIXLE_MPI_FAULT_PLAN=2:{action}:estep_before:2 MIXLE_MPI_HEARTBEAT_PERIOD={period:g} "
        f"MIXLE_MPI_HEARTBEAT_TIMEOUT={timeout:g} {python} -m mixle_mpi run -n 4 -- {python} -m "
        "mixle_mpi.fitting.fitjob --n 20000 --num-shards 3 --max-its 4 --quiet"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--period", type=float, default=0.1)
    ap.add_argument("--timeout", type=float, default=1.0)
    ap.add_argument("--quick", action="store_true", help="2 repetitions")
    ap.add_argument("--openmpi-python", default=str(REPO / ".venv" / "bin" / "python"))
    ap.add_argument("--mpich-python", default=str(REPO / ".venv-mpich" / "bin" / "python"))
    args = ap.parse_args(argv)
    reps = 2 if args.quick else args.reps
    libs = [
        (n, p)
        for n, p in (("openmpi", args.openmpi_python), ("mpich", args.mpich_python))
        if os.path.exists(p)
    ]
    report = measure(libs, reps, args.period, args.timeout)
    out = [
        f"# Detection latency (heartbeat period {args.period:g} s, timeout {args.timeout:g} s, {reps} reps)",
        "",
        "| MPI | action | detected by | median ms | min ms | max ms | in heartbeat periods | failed runs |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in report:
        lat = row["latencies_ms"]
        if lat:
            med = statistics.median(lat)
            out.append(
                f"| {row['mpi']} | {row['action']} | {', '.join(row['causes'])} | {med:.1f} | {min(lat):.1f} | "
                f"{max(lat):.1f} | {med / 1000.0 / args.period:.1f} | {len(row['failed'])} |"
            )
    text = "\n".join(out)
    print(text)
    res = REPO / "bench" / "results"
    res.mkdir(parents=True, exist_ok=True)
    (res / "detection.md").write_text(
        text + "\n\nCommand: `python bench/detection.py " + " ".join(argv or sys.argv[1:]) + "`\n"
    )
    (res / "detection.json").write_text(
        json.dumps({"period": args.period, "timeout": args.timeout, "runs": report}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
