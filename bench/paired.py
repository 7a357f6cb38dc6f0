"""Issue 15's ratio at the quick sizes, ours and mixle's handle fitted in the same job.

Each job (``bench/_paired_job.py``) fits with mixle's ``MPIEncodedData`` and then with ours on
the same W processes (ours: the driver computing its share and W - 1 workers, the default),
and gives one ratio: ours' per-iteration median over mixle's. The jobs repeat, models
interleaved; the figure is the median ratio over jobs, with its quartiles.

Why: ``bench/polling.py`` pairs back-to-back jobs, and this machine moves by up to 20 %
from one job to the next, so its ratios scatter from 0.8 to 1.5 (``results/polling.md``).
Within one job the processes, their cores and the data are the same for both fits.

    python bench/paired.py [--jobs 10] [--its 30] [--models gmm1d,diag,hmm] [--defaults] [--full] [--out results/paired.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import common  # noqa: E402

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_paired_job.py")


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    if len(xs) < 2:
        return (xs[0], xs[0], xs[0])
    q = statistics.quantiles(xs, n=4)
    return (q[0], statistics.median(xs), q[2])


def measure(
    python: str,
    models: list[str],
    jobs: int,
    its: int,
    ranks: int = 2,
    defaults: bool = False,
    sizes: dict | None = None,
) -> list[dict]:
    """``jobs`` jobs per model (models interleaved); per model: the median ratio over jobs, its
    quartiles, each job's ratio and record, and the command of one job."""
    sizes = sizes or common.QUICK_N
    recs: dict = {m: [] for m in models}
    cmds: dict = {}
    with tempfile.TemporaryDirectory(prefix="mixle_mpi_paired_") as tmp:
        for job in range(jobs):
            for model in models:
                out = os.path.join(tmp, f"{model}-{job}.json")
                cmd = common.launcher(
                    python,
                    ranks,
                    [
                        python,
                        JOB,
                        "--model",
                        model,
                        "--n",
                        str(sizes[model]),
                        "--its",
                        str(its),
                        "--out",
                        out,
                        *(["--defaults"] if defaults else []),
                    ],
                )
                rec = common.run_record(cmd, out, f"{model} job {job + 1}")
                if rec is None:
                    continue
                rec["command"] = cmds[model] = common.show(cmd, {}, tmp)
                recs[model].append(rec)
                common.log(
                    f"{model} job {job + 1}: ours {rec['ours_ms_per_it']:.2f} ms/it, mixle "
                    f"{rec['mixle_ms_per_it'][-1]:.2f}: {rec['ratio']:.3f}"
                )
    rows = []
    for model in models:
        rs = recs[model]
        if not rs:
            continue
        q1, med, q3 = quartiles([r["ratio"] for r in rs])
        ours = statistics.median(r["ours_ms_per_it"] for r in rs)
        mixle = statistics.median(
            statistics.median(r["mixle_ms_per_it"][1:] or r["mixle_ms_per_it"]) for r in rs
        )
        rows.append(
            {
                "model": model,
                "n": sizes[model],
                "jobs": len(rs),
                "ratio_median": med,
                "ratio_quartiles": [q1, q3],
                "ratios": [r["ratio"] for r in rs],
                "ours_ms": ours,
                "mixle_ms": mixle,
                "same_final_ll": all(r.get("same_final_ll") for r in rs),
                "checkpoint_share_max": max((r.get("checkpoint_share") or 0.0) for r in rs),
                "command": cmds[model],
                "records": rs,
            }
        )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--jobs", type=int, default=10)
    ap.add_argument("--its", type=int, default=30)
    ap.add_argument("--ranks", type=int, default=2, help="W: E-step processes, in both fits")
    ap.add_argument("--models", default="gmm1d,diag,hmm")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument(
        "--out", default=None, help="write every job's record and the figures here (JSON)"
    )
    ap.add_argument(
        "--defaults",
        action="store_true",
        help="ours as mixle-mpi fit runs by default (mixle_mpi.fit: checkpoints on the default cadence, "
        "failover armed), with the checkpoints' share of its wall time",
    )
    ap.add_argument(
        "--full",
        action="store_true",
        help=f"report item 1's full sizes {common.FULL_N} instead of the quick {common.QUICK_N}",
    )
    args = ap.parse_args(argv)
    rows = measure(
        args.python,
        args.models.split(","),
        args.jobs,
        args.its,
        args.ranks,
        args.defaults,
        common.FULL_N if args.full else common.QUICK_N,
    )
    print(
        "| model | N | jobs | ours / mixle, median (quartiles) | ours ms/it | mixle ms/it | checkpoints' share (max) |"
    )
    print("|---|---:|---:|---|---:|---:|---:|")
    for row in rows:
        q1, q3 = row["ratio_quartiles"]
        print(
            f"| {row['model']} | {row['n']:,} | {row['jobs']} | **{row['ratio_median']:.3f}** ({q1:.3f}-{q3:.3f}) "
            f"| {row['ours_ms']:.2f} | {row['mixle_ms']:.2f} | {row['checkpoint_share_max']:.2%} |"
        )
    common.write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
