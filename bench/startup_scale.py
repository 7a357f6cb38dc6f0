"""Startup against W and N: workers reading their own shards vs the driver streaming them
(issue 13, "Startup at scale").

Each job fits 1-D GMM data given as an ``h5py.Dataset`` (``bench/memory_startup.py``), one
EM iteration, with ``workers_read_store`` on and ``own_read_min_bytes`` 0 (every worker
opens the shard store, which is on this machine's one file system, and reads its own
shards, however little) and off (the driver reads every block and sends it). The default
threshold (8 MiB per worker) comes from these figures. Reported: the shard load phase (``shard_load``:
from the first load message to the last ``Loaded``) and launch to the first E-step, as
ratios own / streamed within the same repetition (the two modes alternate).

    python bench/startup_scale.py [--workers 2,8,16] [--sizes 1000000,10000000] [--reps 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import common  # noqa: E402
from bench.memory_startup import job_command, phases, write_h5  # noqa: E402

MODES = {"streamed": "0", "own": "1"}


def one(python: str, h5: str, w: int, mode: str, out: str) -> dict | None:
    env = common.job_env(
        {
            "MIXLE_MPI_WORKERS_READ_STORE": MODES[mode],
            "MIXLE_MPI_OWN_READ_MIN_BYTES": "0",
            "MIXLE_MPI_ALLOW_MANY_RANKS": "1",
        }
    )
    cmd = [c.replace("{now}", f"{time.time():.6f}") for c in job_command(python, h5, w, 1, out)]
    rc, log, _ = common.run(cmd, env=env)
    if rc != 0 or not os.path.exists(out):
        common.log(f"W={w} {mode}: FAILED rc {rc}\n{log[-1500:]}")
        return None
    with open(out, encoding="utf-8") as fh:
        rec = json.load(fh)
    p = phases(rec)
    return {"shard_load": p["shard_load"], "first_round": sum(p.values())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--workers", default="2,8,16")
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--name", default="startup_scale")
    args = ap.parse_args(argv)
    ws = [int(x) for x in args.workers.split(",")]
    sizes = [int(x) for x in args.sizes.split(",")]
    rows: dict[tuple, list] = {}
    with tempfile.TemporaryDirectory(prefix="mixle_mpi_startup_") as tmp:
        for n in sizes:
            write_h5(os.path.join(tmp, f"data_{n}.h5"), n)
        for rep in range(args.reps):
            for n in sizes:
                for w in ws:
                    for mode in ("streamed", "own") if rep % 2 == 0 else ("own", "streamed"):
                        r = one(
                            args.python,
                            os.path.join(tmp, f"data_{n}.h5"),
                            w,
                            mode,
                            os.path.join(tmp, "r.json"),
                        )
                        if r:
                            common.log(
                                f"N={n:,} W={w} {mode}: load {r['shard_load']:.2f} s, first round {r['first_round']:.2f} s"
                            )
                            rows.setdefault((n, w, mode), []).append(r)
    out = [
        "# Startup against W and N: workers read their own shards, or the driver streams them",
        "",
        f"Machine: `nproc` = {os.cpu_count()}; W + 1 ranks oversubscribed above 1; {args.reps} repetitions, "
        "modes alternating. Medians; ratio = own / streamed of the same repetition.",
        "",
        "| N | W | shard load s, streamed | shard load s, own | load ratio | launch to first E-step s, streamed | own | ratio |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    report = []
    for n in sizes:
        for w in ws:
            s, o = rows.get((n, w, "streamed"), []), rows.get((n, w, "own"), [])
            if not s or not o:
                out.append(f"| {n:,} | {w} | failed | | | | | |")
                continue
            med = {
                k: (statistics.median(x[k] for x in s), statistics.median(x[k] for x in o))
                for k in ("shard_load", "first_round")
            }
            lr = statistics.median(
                b["shard_load"] / a["shard_load"] for a, b in zip(s, o, strict=False)
            )
            fr = statistics.median(
                b["first_round"] / a["first_round"] for a, b in zip(s, o, strict=False)
            )
            out.append(
                f"| {n:,} | {w} | {med['shard_load'][0]:.2f} | {med['shard_load'][1]:.2f} | {lr:.2f} | "
                f"{med['first_round'][0]:.2f} | {med['first_round'][1]:.2f} | {fr:.2f} |"
            )
            report.append(
                {
                    "n": n,
                    "workers": w,
                    "streamed": s,
                    "own": o,
                    "load_ratio": lr,
                    "first_round_ratio": fr,
                }
            )
    out += [
        "",
        f"Command: `python bench/startup_scale.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
    ]
    text = "\n".join(out)
    print(text)
    res = os.path.join(common.BENCH, "results")
    with open(os.path.join(res, f"{args.name}.md"), "w", encoding="utf-8") as fh:
        fh.write(text + "\n")
    with open(os.path.join(res, f"{args.name}.json"), "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
