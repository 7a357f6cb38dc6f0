"""Issue 15: what polling finely while a message is due (``policy/pacing.py``) buys per iteration.

Three jobs per model and repetition, interleaved so that the machine's drift hits all three
alike: ours with pacing windows, ours without them (``--no-poll-windows``: every wait backs
off to 1 ms as before), and mixle's own ``MPIEncodedData`` on the same number of E-step
processes. Each job runs ``--its`` EM iterations; its per-iteration median (iterations 2..)
is the figure. Ratios are per repetition (back-to-back jobs), then the median over reps.
Also reported from the rank-0 calls: the scoring call (a round whose work is tiny, so it is
mostly fixed cost) for each variant.

    python bench/polling.py [--reps 5] [--its 20] [--models gmm1d,diag,hmm]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import common  # noqa: E402

QUICK_N = {"gmm1d": 50_000, "diag": 10_000, "hmm": 2_000}
VARIANTS = {  # label -> (backend, ranks beyond W, extra _job.py args)
    "windows": ("resilient", 1, []),
    "no windows": ("resilient", 1, ["--no-poll-windows"]),
    "mixle": ("mixle", 0, []),
}


def one(python: str, tmp: str, model: str, variant: str, rep: int, its: int, workers: int) -> dict | None:
    backend, extra_ranks, extra = VARIANTS[variant]
    out = os.path.join(tmp, f"{model}-{variant.replace(' ', '_')}-{rep}.json")
    cmd = common.launcher(python, workers + extra_ranks,
                          [python, common.JOB, "--backend", backend, "--model", model, "--n", str(QUICK_N[model]),
                           "--its", str(its), "--mixle-data", "root", "--out", out, *extra])
    rc, log, _ = common.run(cmd)
    if rc != 0 or not os.path.exists(out):
        common.log(f"{model} {variant} rep {rep + 1}: FAILED rc={rc}: {log[-500:]}")
        return None
    with open(out, encoding="utf-8") as fh:
        rec = json.load(fh)
    rec["command"] = common.show(cmd, {}, tmp)
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--its", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--models", default="gmm1d,diag,hmm")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", default=None, help="write the raw records and the figures here (JSON)")
    args = ap.parse_args(argv)
    models = args.models.split(",")
    recs: dict = {m: {v: [] for v in VARIANTS} for m in models}
    with tempfile.TemporaryDirectory(prefix="mixle_mpi_polling_") as tmp:
        for rep in range(args.reps):
            for model in models:
                for variant in VARIANTS:
                    rec = one(args.python, tmp, model, variant, rep, args.its, args.workers)
                    recs[model][variant].append(rec)
                    if rec:
                        common.log(f"{model} {variant} rep {rep + 1}: {rec['median'] * 1e3:.2f} ms/it")
    rows = []
    print("| model | N | windows ms/it | no windows ms/it | mixle ms/it | windows / mixle | no windows / mixle "
          "| windows / no windows | scoring call ms: windows / no windows / mixle |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for model in models:
        r = recs[model]
        ok = [i for i in range(args.reps) if all(r[v][i] for v in VARIANTS)]

        def med(v, key="median"):
            return statistics.median(r[v][i][key] for i in ok) * 1e3

        def paired(a, b):
            return [r[a][i]["median"] / r[b][i]["median"] for i in ok]

        def llsum(v):
            return statistics.median(r[v][i]["rank0_llsum_call"]["median"] for i in ok) * 1e3

        row = {"model": model, "n": QUICK_N[model], "reps": len(ok),
               "ms": {v: med(v) for v in VARIANTS},
               "windows/mixle": paired("windows", "mixle"), "no windows/mixle": paired("no windows", "mixle"),
               "windows/no windows": paired("windows", "no windows"),
               "llsum_ms": {v: llsum(v) for v in VARIANTS},
               "commands": {v: r[v][ok[0]]["command"] for v in VARIANTS} if ok else {}}
        rows.append(row)
        print(f"| {model} | {QUICK_N[model]:,} | {row['ms']['windows']:.2f} | {row['ms']['no windows']:.2f} | "
              f"{row['ms']['mixle']:.2f} | {statistics.median(row['windows/mixle']):.3f} | "
              f"{statistics.median(row['no windows/mixle']):.3f} | {statistics.median(row['windows/no windows']):.3f} | "
              f"{row['llsum_ms']['windows']:.2f} / {row['llsum_ms']['no windows']:.2f} / {row['llsum_ms']['mixle']:.2f} |")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump({"argv": sys.argv[1:], "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
