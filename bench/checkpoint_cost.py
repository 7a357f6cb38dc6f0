"""Cost of checkpoints (and of the fold journal) per EM iteration, measured in one run.

Runs the built-in fit with a checkpoint after every iteration (and once more with the fold
journal on) and reports each write's time from the event log next to the iteration's own
time (E-step + log-density rounds), so the ratio needs no cross-run comparison.

    python bench/checkpoint_cost.py [--model gmm1d] [--n 1000000] [--its 8]
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


def run(python: str, model: str, n: int, its: int, journal: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="mixle_mpi_ckbench_") as tmp:
        events, out = os.path.join(tmp, "events.jsonl"), os.path.join(tmp, "r.json")
        cmd = [
            python,
            "-m",
            "mixle_mpi",
            "run",
            "-n",
            "4",
            "--timeout",
            "900",
            "--",
            python,
            "-m",
            "mixle_mpi.fitjob",
            "--model",
            model,
            "--n",
            str(n),
            "--max-its",
            str(its),
            "--num-shards",
            "3",
            "--quiet",
            "--workdir",
            os.path.join(tmp, "w"),
            "--out",
            out,
            "--checkpoint",
            os.path.join(tmp, "ck.h5"),
        ]
        if journal:
            cmd.append("--fold-journal")
        env = dict(
            os.environ, PYTHONWARNINGS="ignore", MIXLE_MPI_EVENT_LOG=events, MIXLE_MPI_FAULT_PLAN=""
        )
        subprocess.run(cmd, check=True, capture_output=True, timeout=1000, env=env)
        ev = [json.loads(line) for line in open(events)]
        res = json.load(open(out))
    writes = [e["seconds"] for e in ev if e["event"] == "checkpoint" and not e["finished"]]
    rounds = res["rounds"]
    its_time = [
        a["seconds"] + b["seconds"]
        for a, b in zip(
            [r for r in rounds if r["kind"] == "estep"],
            [r for r in rounds if r["kind"] == "llsum"][1:],
            strict=False,
        )
    ]
    return {
        "write_ms": statistics.median(writes) * 1e3,
        "iteration_ms": statistics.median(its_time) * 1e3,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default="gmm1d")
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--its", type=int, default=8)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args(argv)
    rows = []
    for journal in (False, True):
        r = run(args.python, args.model, args.n, args.its, journal)
        rows.append(
            f"| {'checkpoint + fold journal' if journal else 'checkpoint every iteration'} | "
            f"{r['write_ms']:.1f} | {r['iteration_ms']:.1f} | {r['write_ms'] / r['iteration_ms']:.3f} |"
        )
    text = "\n".join(
        [
            f"# Checkpoint cost ({args.model}, N={args.n:,}, 3 workers)",
            "",
            "| mode | checkpoint write ms (median) | iteration ms (median) | write / iteration |",
            "|---|---:|---:|---:|",
            *rows,
            "",
            "The journal's own cost is inside the iteration time (one HDF5 write per shard and round).",
            f"Command: `python bench/checkpoint_cost.py --model {args.model} --n {args.n} --its {args.its}`",
        ]
    )
    print(text)
    (REPO / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (REPO / "bench" / "results" / "checkpoint_cost.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
