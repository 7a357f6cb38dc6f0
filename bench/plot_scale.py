"""Draw the scaling curve of ``bench/scale_real.py``'s results (issue 13) as a PNG for the README.

Three panels against W (workers): the driver's CPU per round with the issue's linear bound,
the heartbeats the driver receives per second, and the E-step round's wall latency, each as
a ratio to the smallest W of the run (so the lines read as "how many times W = 2").

    python bench/plot_scale.py [--json bench/results/scale_real.json] [--out bench/results/scale_real.png]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
SERIES = (
    ("driver_cpu_per_round", "driver CPU per round"),
    ("beats_per_s_idle", "heartbeats received per second (idle)"),
    ("estep_round_latency", "E-step round latency (wall, oversubscribed)"),
)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--json", default=os.path.join(BENCH, "results", "scale_real.json"))
    ap.add_argument("--out", default=os.path.join(BENCH, "results", "scale_real.png"))
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(args.json, encoding="utf-8") as fh:
        data = json.load(fh)
    per = {int(w): v for w, v in data["per_workers"].items() if v.get("reps_ok")}
    ws = sorted(per)
    base = ws[0]
    fig, axes = plt.subplots(1, len(SERIES), figsize=(13, 4))
    for ax, (key, title) in zip(axes, SERIES, strict=False):
        ratios = [per[w][key] / per[base][key] for w in ws]
        ax.plot(ws, ratios, "o-", label="measured")
        ax.plot(ws, [w / base for w in ws], "--", color="grey", label=f"linear in W (W / {base})")
        if key == "driver_cpu_per_round":
            ax.plot(
                ws, [1.2 * w / base for w in ws], ":", color="red", label="target: linear x 1.2"
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xticks(ws, [str(w) for w in ws])
        ax.set_xlabel("workers W")
        ax.set_ylabel(f"ratio to W = {base}")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    meta = data.get("meta", {})
    fig.suptitle(
        f"mixle_mpi driver against W: real jobs on {meta.get('nproc', '?')} cores "
        f"({meta.get('started', '')[:10]}, `{meta.get('command', '')}`)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
