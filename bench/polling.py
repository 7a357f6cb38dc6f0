"""Issue 15: what the fixed cost of a round comes to per iteration, and what cut it.

Jobs per model and repetition, interleaved so that the machine's drift hits all alike:
ours as it is (the driver computing a share, ``driver_computes``, doorbells,
``runtime/doorbell.py``, and the E-step computed in the scoring round,
``policy/lookahead.py``), then with the driver computing no shard (one more rank, as before
issue 15's fourth part) and on top of that a round per call (``MIXLE_MPI_ESTEP_AHEAD=0``),
neither (pacing windows only, ``policy/pacing.py``), no windows either
(``--no-poll-windows``: every wait backs off to 1 ms), and mixle's own ``MPIEncodedData`` on
the same number of E-step processes. Each job runs ``--its`` EM iterations; its per-iteration median (iterations 2..)
is the figure. Ratios are per repetition (back-to-back jobs), then the median over reps.
Also reported from the rank-0 calls: the scoring call (a round whose work is tiny, so it is
mostly fixed cost) for each variant.

    python bench/polling.py [--reps 5] [--its 20] [--models gmm1d,diag,hmm]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import common  # noqa: E402

OFF = {"MIXLE_MPI_DOORBELLS": "0", "MIXLE_MPI_ESTEP_AHEAD": "0"}
IDLE = {"MIXLE_MPI_DRIVER_COMPUTES": "0"}
VARIANTS = {  # label -> (backend, ranks beyond W, extra _job.py args, environment)
    # the default: the driver computes a worker's share (setting driver_computes), so W E-step
    # processes are the driver and W - 1 workers, as many processes as mixle's
    "default": ("resilient", 0, [], {}),
    # the driver computes no shard: W workers + 1 driver (the default before issue 15's fourth part)
    "driver idle": ("resilient", 1, [], IDLE),
    "no ahead": (
        "resilient",
        1,
        [],
        {**IDLE, "MIXLE_MPI_ESTEP_AHEAD": "0"},
    ),  # driver idle, a round per call
    "windows": ("resilient", 1, [], {**IDLE, **OFF}),  # as before issue 15's second part
    "no windows": ("resilient", 1, ["--no-poll-windows"], {**IDLE, **OFF}),  # as before issue 15
    # Open MPI yields the core at every probe that finds nothing when oversubscribed: measured
    # no difference either way (bench/results/polling.md), so not in the default set
    "no yield": ("resilient", 0, [], {"OMPI_MCA_mpi_yield_when_idle": "0"}),
    "mixle": ("mixle", 0, [], {}),
}


def one(
    python: str, tmp: str, model: str, variant: str, rep: int, its: int, workers: int
) -> dict | None:
    backend, extra_ranks, extra, env = VARIANTS[variant]
    out = os.path.join(tmp, f"{model}-{variant.replace(' ', '_')}-{rep}.json")
    job = [
        python,
        common.JOB,
        "--backend",
        backend,
        "--model",
        model,
        "--n",
        str(common.QUICK_N[model]),
        "--its",
        str(its),
        "--mixle-data",
        "root",
        "--out",
        out,
        *extra,
    ]
    ranks = workers + extra_ranks
    cmd = (
        common.launcher(python, ranks, job) if ranks > 1 else job
    )  # one rank: a singleton, no launcher
    rec = common.run_record(
        cmd, out, f"{model} {variant} rep {rep + 1}", {**common.job_env(), **env}
    )
    if rec is None:
        return None
    rec["command"] = common.show(cmd, env, tmp)
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--its", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--models", default="gmm1d,diag,hmm")
    ap.add_argument(
        "--variants",
        default=",".join(v for v in VARIANTS if v != "no yield"),
        help="comma list of " + ", ".join(VARIANTS),
    )
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", default=None, help="write the raw records and the figures here (JSON)")
    args = ap.parse_args(argv)
    models = args.models.split(",")
    variants = args.variants.split(",")
    if "mixle" not in variants:
        variants.append("mixle")
    recs: dict = {m: {v: [] for v in variants} for m in models}
    with tempfile.TemporaryDirectory(prefix="mixle_mpi_polling_") as tmp:
        for rep in range(args.reps):
            for model in models:
                for variant in variants:
                    rec = one(args.python, tmp, model, variant, rep, args.its, args.workers)
                    recs[model][variant].append(rec)
                    if rec:
                        common.log(
                            f"{model} {variant} rep {rep + 1}: {rec['median'] * 1e3:.2f} ms/it"
                        )
    rows = []
    ours = [v for v in variants if v != "mixle"]
    print(
        "| model | N | "
        + " | ".join(f"{v} ms/it" for v in variants)
        + " | "
        + " | ".join(f"{v} / mixle" for v in ours)
        + " | scoring call ms: "
        + " / ".join(variants)
        + " | E-step round beyond the workers' compute, ms: "
        + " / ".join(ours)
        + " |"
    )
    print("|---|---:|" + "---:|" * (len(variants) + len(ours)) + "---|---|")
    for model in models:
        r = recs[model]
        ok = [i for i in range(args.reps) if all(r[v][i] for v in variants)]
        if not ok:
            continue

        def med(v, key="median", r=r, ok=ok):
            return statistics.median(r[v][i][key] for i in ok) * 1e3

        def paired(a, b, r=r, ok=ok):
            return [r[a][i]["median"] / r[b][i]["median"] for i in ok]

        def llsum(v, r=r, ok=ok):
            return statistics.median(r[v][i]["rank0_llsum_call"]["median"] for i in ok) * 1e3

        def overhead(v, r=r, ok=ok):
            """The E-step round's time beyond the slowest E-step process's compute in it (the
            scoring compute too when the round computes it), the median over rounds of each
            round's own difference (bench/_job.py): what the round costs."""
            if v == "mixle":
                return None
            vals = [r[v][i]["round_beyond_compute"].get("median") for i in ok]
            vals = [x for x in vals if x is not None]
            return statistics.median(vals) * 1e3 if vals else None

        row = {
            "model": model,
            "n": common.QUICK_N[model],
            "reps": len(ok),
            "round_overhead_ms": {v: overhead(v) for v in ours},
            "ms": {v: med(v) for v in variants},
            "per_rep_vs_mixle": {v: paired(v, "mixle") for v in ours},
            "llsum_ms": {v: llsum(v) for v in variants},
            "commands": {v: r[v][ok[0]]["command"] for v in variants},
        }
        rows.append(row)
        print(
            f"| {model} | {common.QUICK_N[model]:,} | "
            + " | ".join(f"{row['ms'][v]:.2f}" for v in variants)
            + " | "
            + " | ".join(f"{statistics.median(row['per_rep_vs_mixle'][v]):.3f}" for v in ours)
            + " | "
            + " / ".join(f"{row['llsum_ms'][v]:.2f}" for v in variants)
            + " | "
            + " / ".join(common.fmt(row["round_overhead_ms"][v]) for v in ours)
            + " |"
        )
    common.write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
