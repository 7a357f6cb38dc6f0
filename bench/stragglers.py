"""A slow worker: seconds per iteration against a clean run of the same job, in the same run.

    python bench/stragglers.py                 # the full item (about 4 minutes here)
    python bench/stragglers.py --smoke         # CI's slice: one pair, a few iterations

One of W = 3 workers (the driver computes no shard) turns ``k`` times slower at E-step 1
(the ``slow`` chaos action, chaos/fault_plan.py: each of its shards takes k times as long, its
heartbeats go on). Cases, each with speculation on and off (``MIXLE_MPI_SPECULATION``):

- *sleep*: the E-step stand-in of bench/_slow_job.py (each shard sleeps first), so every
  rank behaves as if it had a core of its own on this 2-core machine (and the job is told
  so: ``MIXLE_MPI_CORES``); compared with the capacity bound W / (W - 1 + s) of a worker at
  speed s = 1/k;
- *real*: the real E-step of a 1-D mixture, four ranks sharing the 2 cores.

Per run: the median and mean seconds per iteration (iterations 2..its: the first has no
start stamp), the copies started and won, the shards moved, and the bits (each run's log
likelihoods against the clean run's). Rounds alternate between cases, so drift on a noisy
machine lands on all of them. Nothing is asserted: the report prints ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
W = 3


def run_case(python: str, stand_in: str, k: float, speculation: bool, args, work: str) -> dict:
    """One fit; its record (bench/_job.py) with the job's speculation events."""
    os.makedirs(work, exist_ok=True)
    out = os.path.join(work, "record.json")
    env = {
        **os.environ,
        "MIXLE_MPI_DRIVER_COMPUTES": "0",
        "MIXLE_MPI_SPECULATION": "1" if speculation else "0",
    }
    if stand_in == "sleep":  # sleeping ranks do not compete for the 2 cores: as if each had its own
        env["MIXLE_MPI_CORES"] = str(W + 1)
    env.pop("MIXLE_MPI_FAULT_PLAN", None)
    if k > 1:
        env["MIXLE_MPI_FAULT_PLAN"] = f"2:slow:estep_before:1:0::{k:g}"
    sleep = ["--shard-sleep", f"{args.shard_sleep:g}"] if stand_in == "sleep" else []
    n = args.sleep_rows if stand_in == "sleep" else args.real_rows
    cmd = [
        python,
        "-m",
        "mixle_mpi",
        "run",
        "-n",
        str(W + 1),
        "--",
        python,
        os.path.join(ROOT, "bench", "_slow_job.py"),
        "--backend",
        "resilient",
        "--model",
        "gmm1d",
        "--n",
        str(n),
        "--its",
        str(args.its),
        "--num-shards",
        str(args.shards),
        "--workdir",
        work,
        "--out",
        out,
        *sleep,
    ]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(
            f"case {stand_in} k={k} speculation={speculation} failed:\n{proc.stderr[-3000:]}"
        )
    rec = json.load(open(out))
    events = [json.loads(line) for line in open(os.path.join(work, "events.jsonl")) if line.strip()]
    per = rec["per_iteration_seconds"]
    return {
        "stand_in": stand_in,
        "k": k,
        "speculation": speculation,
        "median_s": statistics.median(per),
        "mean_s": statistics.fmean(per),
        "per_iteration_s": per,
        "wall_s": time.monotonic() - t0,
        "lls": rec["lls"],
        "copies": sum(
            len(ss) for e in events if e["event"] == "speculated" for ss in e["copies"].values()
        ),
        "won": sum(len(e["shards"]) for e in events if e["event"] == "speculation_won"),
        "moves": sum(len(e["moves"]) for e in events if e["event"] == "rebalanced"),
        "failures": sum(1 for e in events if e["event"] == "failure_detected"),
    }


def report(runs: list[dict], args) -> str:
    def med(stand_in, k, spec):
        xs = [
            r["median_s"]
            for r in runs
            if (r["stand_in"], r["k"], r["speculation"]) == (stand_in, k, spec)
        ]
        return statistics.median(xs) if xs else None

    lines = [
        "| stand-in | worker speed | speculation | s/iteration (median) | vs clean | capacity bound | vs bound | "
        "copies / won / moves per run | same bits |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for stand_in in dict.fromkeys(r["stand_in"] for r in runs):
        clean = med(stand_in, 1.0, True)
        for k in dict.fromkeys(r["k"] for r in runs if r["stand_in"] == stand_in):
            for spec in (True, False):
                got = med(stand_in, k, spec)
                if got is None:
                    continue
                bound = W / (W - 1 + 1 / k)
                mine = [
                    r
                    for r in runs
                    if (r["stand_in"], r["k"], r["speculation"]) == (stand_in, k, spec)
                ]
                ref = next(
                    r
                    for r in runs
                    if (r["stand_in"], r["k"], r["speculation"]) == (stand_in, 1.0, True)
                )
                same = all(r["lls"] == ref["lls"] for r in mine)
                cmw = " / ".join(
                    f"{statistics.median([r[x] for r in mine]):g}"
                    for x in ("copies", "won", "moves")
                )
                b = f"{bound:.3f}" if stand_in == "sleep" else "-"
                vb = f"{got / clean / bound:.3f}" if stand_in == "sleep" else "-"
                lines.append(
                    f"| {stand_in} | 1/{k:g} | {'on' if spec else 'off'} | {got:.4f} | {got / clean:.3f} | {b} "
                    f"| {vb} | {cmw} | {'yes' if same else 'NO'} |"
                )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--its", type=int, default=16)
    ap.add_argument("--shards", type=int, default=24)
    ap.add_argument(
        "--shard-sleep", type=float, default=0.02, help="the sleep stand-in's seconds per shard"
    )
    ap.add_argument("--sleep-rows", type=int, default=24000)
    ap.add_argument("--real-rows", type=int, default=600000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="one sleep pair (clean, 1/4 with speculation), 6 iterations",
    )
    ap.add_argument(
        "--out", default=None, help="write the JSON here (and the table beside it, .md)"
    )
    ap.add_argument(
        "--cases",
        default=None,
        help="only these cases, e.g. real:1:on,real:1:off (stand-in:k:speculation)",
    )
    args = ap.parse_args(argv)
    cases = [
        ("sleep", 1.0, True),
        ("sleep", 1.0, False),
        ("sleep", 2.0, True),
        ("sleep", 2.0, False),
        ("sleep", 4.0, True),
        ("sleep", 4.0, False),
        ("real", 1.0, True),
        ("real", 1.0, False),
        ("real", 4.0, True),
        ("real", 4.0, False),
    ]
    if args.cases:
        cases = [
            (a, float(b), c == "on") for a, b, c in (x.split(":") for x in args.cases.split(","))
        ]
    if args.smoke:
        args.its, args.repeats, args.shards = 8, 1, 12
        cases = [("sleep", 1.0, True), ("sleep", 4.0, True)]
    runs = []
    with tempfile.TemporaryDirectory(prefix="stragglers-") as tmp:
        for rep in range(args.repeats):
            for i, (stand_in, k, spec) in enumerate(cases):
                runs.append(
                    run_case(args.python, stand_in, k, spec, args, os.path.join(tmp, f"r{rep}-{i}"))
                )
                print(
                    f"rep {rep} {stand_in} 1/{k:g} speculation {'on' if spec else 'off'}: "
                    f"{runs[-1]['median_s']:.4f} s/it",
                    flush=True,
                )
    table = report(runs, args)
    print(table)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"config": vars(args), "runs": runs}, fh, indent=1)
        with open(os.path.splitext(args.out)[0] + ".table.md", "w") as fh:
            fh.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
