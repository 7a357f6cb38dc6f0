"""Item 8: per-core throughput of each E-step engine, against scikit-learn and mixle's
multiprocessing backend, on one core, in the same run.

Each case runs in its own process pinned to one core with one BLAS thread. "ours" is one
core doing all of a worker's and the driver's work per EM iteration: every shard's E-step
and score (``estep.shard_result``, as a round computes them), the fold in shard order and
mixle's M-step; messaging is not in it (items 1 and 6 measure the real jobs). mixle's
multiprocessing backend runs one worker (``ResilientMPEncodedData(num_workers=1)``, its
driver idle on the same core); scikit-learn's ``GaussianMixture`` (diagonal; the 1-D case as
D=1) fits ``its`` and 1 iterations, the difference per iteration. Ratios are throughput
(points x iterations / s / core), ours / peer, paired within a repetition (medians).

    python bench/engines.py --run diag --n 200000 --its 5 --out r.json   (one case)
    python bench/run.py --only 8 --merge                                  (the report item)
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

SHARDS = 4
CASES = {  # name: (model, rows, BLAS-shaped peer)
    "diag": ("diag16x8", 200_000, "sklearn"),
    "gmm1d": ("gmm1d", 1_000_000, "sklearn"),
    "poisson": ("poisson", 1_000_000, None),
}
ENGINES = ("seq", "fused")


def _model(name: str):
    from mixle_mpi.fitting import models

    return models.diag_mixture(16, 8) if name == "diag16x8" else models.get_model(name)


def _start(est, shards):
    from mixle.utils.parallel.resilient_em import checkpointed_fold

    from mixle_mpi.core import estep

    payloads = [estep.init_shard(est, 0.1, 11 + i, c) for i, c in enumerate(shards)]
    return est.estimate(*checkpointed_fold(est, payloads))


def run_ours(est, data, its: int, engine: str) -> list[float]:
    """Seconds of each EM iteration after a first, untimed one (its compile, if any)."""
    from mixle.utils.parallel.resilient_em import checkpointed_fold

    from mixle_mpi.core import estep

    enc = est.accumulator_factory().make().acc_to_encoder()
    shards = [estep.encode_shard(enc, data[i::SHARDS], 1) for i in range(SHARDS)]
    model, seconds = _start(est, shards), []
    for _ in range(its + 1):
        t0 = time.perf_counter()
        results = [
            estep.shard_result("estep", (est, model), c, scores=True, engine=engine) for c in shards
        ]
        model = est.estimate(*checkpointed_fold(est, [r[0] for r in results]))
        seconds.append(time.perf_counter() - t0)
    return seconds[1:]


def run_mixle_mp(est, data, its: int) -> list[float]:
    import numpy as np
    from mixle.inference.estimation import optimize
    from mixle.utils.parallel.resilient_em import ResilientMPEncodedData

    stamps: list[float] = []
    with ResilientMPEncodedData(data, estimator=est, num_workers=1) as enc:
        optimize(
            None,
            est,
            enc_data=enc,
            max_its=its + 1,
            delta=None,
            rng=np.random.RandomState(7),
            print_iter=0,
            on_step=lambda step: stamps.append(time.perf_counter()),
        )
    return [b - a for a, b in zip(stamps, stamps[1:], strict=False)]


def run_sklearn(data, k: int, its: int) -> list[float]:
    import warnings

    import numpy as np
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import GaussianMixture

    x = np.asarray(data, dtype=float).reshape(len(data), -1)
    times = {}
    for m in (1, its + 1):
        gm = GaussianMixture(k, covariance_type="diag", max_iter=m, tol=0.0, random_state=0)
        gm.init_params = "random"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            t0 = time.perf_counter()
            gm.fit(x)
            times[m] = time.perf_counter() - t0
    return [(times[its + 1] - times[1]) / its]


def floor_seconds(data, k: int) -> float:
    """The transcendental floor of one pass: N x K exps and N logs (numpy, one core)."""
    import numpy as np

    a = np.random.RandomState(0).rand(len(data), k)
    t0 = time.perf_counter()
    np.log(np.exp(a).sum(axis=1))
    return time.perf_counter() - t0


def run_case(case: str, n: int, its: int) -> dict:
    name, _, peer = CASES[case]
    m = _model(name)
    data, est = m.sample(n, 1), m.estimator()
    k = len(est.estimators)
    out = {e: run_ours(est, data, its, e) for e in ENGINES}
    out["mixle_mp"] = run_mixle_mp(est, data, its)
    if peer:
        out["sklearn"] = run_sklearn(data, k, its)
    out["floor"] = [floor_seconds(data, k)]
    out["bytes"] = int(sum(getattr(r, "nbytes", 8) for r in data[:1000]) * n / 1000)
    return out


def measure(python: str, quick: bool, reps: int | None = None) -> dict:
    reps = reps or (1 if quick else 3)
    its = 2 if quick else 5
    raw: dict = {c: [] for c in CASES}
    with tempfile.TemporaryDirectory(prefix="mixle_mpi_engines_") as tmp:
        for rep in range(reps):
            for case, (_, n, _) in CASES.items():
                n = n // 20 if quick else n
                out = os.path.join(tmp, f"{case}-{rep}.json")
                cmd = [python, os.path.abspath(__file__), "--run", case, "--n", str(n)]
                cmd += ["--its", str(its), "--out", out]
                common.run_record(cmd, out, f"engines rep {rep + 1} {case}")
                if os.path.exists(out):
                    with open(out, encoding="utf-8") as fh:
                        raw[case].append({**json.load(fh), "n": n})
    return {"figures": _figures(raw), "raw": raw}


def _figures(raw: dict) -> list[dict]:
    """Per case, each engine against each peer; the issue's targets on the fused rows (the
    engine ``auto`` picks for these models)."""
    figures = []
    targets = {"diag": ("sklearn", 1.0), "gmm1d": ("today", 2.5), "poisson": ("today", 2.5)}
    for case, recs in raw.items():
        for peer in ("sklearn", "mixle_mp", "today"):
            if not recs or (peer == "sklearn" and "sklearn" not in recs[0]):
                continue
            for engine in ENGINES if peer != "today" else ("fused",):
                ratios = [
                    statistics.median(r["seq" if peer == "today" else peer])
                    / statistics.median(r[engine])
                    for r in recs
                ]
                hit = targets[case][0] == peer and engine == "fused"
                figures.append(
                    _figure(case, peer, engine, ratios, targets[case][1] if hit else None, recs)
                )
    return figures


def _figure(case, peer, engine, ratios, want, recs) -> dict:
    n = recs[0]["n"]
    sec = [statistics.median(r[engine]) for r in recs]
    med = statistics.median(ratios)
    return common.figure(
        "8",
        f"throughput per core, ours[{engine}] / {peer} ({case}, N={n:,}, one core)",
        ratios,
        baseline=f"{peer}: seconds per EM iteration in the same repetition"
        if peer != "today"
        else "ours[seq] (today's E-step) in the same repetition",
        target=None if want is None else f">= {want:g} (issue 47, engine auto)",
        met=None if want is None else med >= want,
        command=f"python bench/engines.py --run {case} --n {n} --its 5 --out r.json",
        engine_ms=common.spread([s * 1e3 for s in sec]),
        gb_per_s=common.spread([r["bytes"] / s / 1e9 for r, s in zip(recs, sec, strict=True)]),
        floor_ms=common.spread([r["floor"][0] * 1e3 for r in recs]),
    )


def detail(f: dict) -> str:
    """The report's line under an item-8 figure: time, data rate and the floor."""
    return (
        f"  - ours: {common.fmt(f['engine_ms']['median'], 1)} ms per iteration, "
        f"{common.fmt(f['gb_per_s']['median'], 3)} GB/s of data per core; transcendental floor "
        f"(N x K exp + N log, numpy) {common.fmt(f['floor_ms']['median'], 1)} ms"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--run", choices=sorted(CASES), required=True)
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--its", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits

    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})  # one core
    with threadpool_limits(limits=1):
        res = run_case(args.run, args.n or CASES[args.run][1], args.its)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(res, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
