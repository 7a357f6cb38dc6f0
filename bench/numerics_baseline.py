"""The cost of the numeric baseline (core/numerics: x86-64-v3, OpenBLAS Haswell) against each
rank's native dispatch, per EM iteration, on this (homogeneous) machine; and the cost of the
default, numerics auto, which pins nothing while the ranks' probes agree: one probe per rank
at startup (timed here), nothing per iteration.

One process per measurement, alternating native and baseline so that load drifts hit both;
each times ``estep.shard_result`` E-steps (with scores, as a fit's round does) of the built-in
models over one shard's rows, and reports its fastest iteration (CPU-bound work on a shared,
loaded machine: the least disturbed one is the truest). The table gives the fastest over the
rounds and the ratio baseline / native of those, measured in the same run; and numpy's
``exp``/``log`` over 10^6 float64 alone.

    .venv/bin/python bench/numerics_baseline.py [--rounds 5] [--its 5] [--out bench/results/numerics_baseline.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

MODELS = {"gmm1d": 40000, "diag": 20000, "poisson": 40000, "hmm": 3000}

KERNELS = {"np.exp": 1_000_000, "np.log": 1_000_000}  # the kernels alone, 10^6 float64

CHILD = r"""
import json, sys, time, pickle
from mixle_mpi.core.estep import encode_shard, shard_result
from mixle_mpi.fitting.models import get_model
name, n, its = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if name.startswith("np."):
    import numpy as np
    f, x = getattr(np, name[3:]), np.linspace(0.5, 30.0, n)
    times = []
    for _ in range(its * 4):
        t = time.perf_counter(); f(x); times.append(time.perf_counter() - t)
    print(json.dumps(min(times))); sys.exit()
m = get_model(name); est = m.estimator(); rows = m.sample(n, 1)
chunks = encode_shard(est.accumulator_factory().make().acc_to_encoder(), rows, 1)
count, value = pickle.loads(shard_result("init", (est, 0.1), chunks, extra=3))
model = est.estimate(count, value)
times = []
for _ in range(its):
    t = time.perf_counter()
    payload, _ = shard_result("estep", (est, model), chunks, scores=True)
    times.append(time.perf_counter() - t)
    model = est.estimate(*pickle.loads(payload))
print(json.dumps(min(times)))
"""


def measure(name: str, n: int, its: int, baseline: bool) -> float:
    from mixle_mpi.core import numerics

    env = dict(os.environ)
    env = numerics.with_baseline({**env, numerics.MODE_ENV: "baseline" if baseline else "auto"})
    out = subprocess.run(
        [sys.executable, "-c", CHILD, name, str(n), str(its)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return float(json.loads(out.stdout.splitlines()[-1]))


PROBE = r"""
import time, mixle.stats
t = time.perf_counter()
from mixle_mpi.core import numerics
numerics.report()
print(time.perf_counter() - t)
"""


def probe_seconds() -> float:
    """One rank's startup probe (mixle imported already, as a rank has by then)."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, check=True
    )
    return float(out.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--its", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from mixle_mpi.core import numerics

    load0 = f"{os.getloadavg()[0]:.1f}"
    lines = [
        "# The numeric baseline's cost (bench/numerics_baseline.py)",
        "",
        f"baseline: {numerics.baseline_env()}; CPU: {numerics.describe()['cpu']}; "
        f"rounds {args.rounds}, E-step iterations per process {args.its}; seconds per "
        "iteration: the fastest; ratio = baseline / native",
        "",
        "| model | rows | native s/it | baseline s/it | ratio |",
        "|---|---|---|---|---|",
    ]
    for name, n in {**MODELS, **KERNELS}.items():
        native, base = [], []
        for _ in range(args.rounds):
            native.append(measure(name, n, args.its, False))
            base.append(measure(name, n, args.its, True))
        row = f"| {name} | {n} | {min(native):.4f} | {min(base):.4f} | {min(base) / min(native):.2f} |"
        print(row, flush=True)
        lines.append(row)
    probe = statistics.median(probe_seconds() for _ in range(3))
    lines[2] += f"; load average {load0} at the start, {os.getloadavg()[0]:.1f} at the end"
    lines += [
        "",
        f"numerics auto (the default): no baseline while the probes agree, so ratio 1 per "
        f"iteration; its startup probe takes {probe:.3f} s per rank (median of 3).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()
