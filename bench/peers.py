"""Item 6: throughput against peers on the same data and iterations.

Point-iterations per second per core (N x iterations / seconds / cores) of mixle_mpi
(W workers; the driver rank, ~0.05 cores, is not counted), scikit-learn's
``GaussianMixture`` (diagonal, fixed iterations: ``tol=0`` never converges early, one
process, one BLAS thread) and mixle's multiprocessing ``ResilientMPEncodedData`` with the
same W, on the diagonal GMM (K=8, D=16). Each peer runs in its own process, interleaved
over repetitions; the ratios (ours / peer) pair runs of the same repetition.

    python bench/peers.py --run sklearn --n 200000 --its 6 --out r.json   (one peer job)
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

K, D = 8, 16


def _data(n: int):
    from mixle_mpi.fitting import models

    return models.diag_mixture(D, K).sample(n, 1)


def run_sklearn(n: int, its: int) -> float:
    """Seconds per EM iteration: fits of ``its`` and of 1 iteration, difference / (its - 1)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import GaussianMixture

    x = _data(n)
    times = {}
    for m in (1, its):
        gm = GaussianMixture(
            n_components=K,
            covariance_type="diag",
            max_iter=m,
            tol=0.0,
            n_init=1,
            init_params="random",
            random_state=0,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            t0 = time.perf_counter()
            gm.fit(x)
            times[m] = time.perf_counter() - t0
        assert gm.n_iter_ == m, gm.n_iter_
    return (times[its] - times[1]) / (its - 1)


def run_mixle_mp(n: int, its: int, workers: int) -> float:
    """Median seconds per iteration (2..its) of mixle's ResilientMPEncodedData."""
    import numpy as np
    from mixle.inference.estimation import optimize
    from mixle.utils.parallel.resilient_em import ResilientMPEncodedData

    from mixle_mpi.fitting import models

    est = models.diag_mixture(D, K).estimator()
    stamps = []
    with ResilientMPEncodedData(_data(n), estimator=est, num_workers=workers) as enc:
        optimize(
            None,
            est,
            enc_data=enc,
            max_its=its,
            delta=None,
            rng=np.random.RandomState(7),
            print_iter=0,
            on_step=lambda step: stamps.append(time.monotonic()),
        )
    return statistics.median(b - a for a, b in zip(stamps, stamps[1:], strict=False))


def peer_command(python: str, peer: str, n: int, its: int, workers: int, out: str) -> list[str]:
    return [
        python,
        os.path.abspath(__file__),
        "--run",
        peer,
        "--n",
        str(n),
        "--its",
        str(its),
        "--workers",
        str(workers),
        "--out",
        out,
    ]


def ours_command(python: str, n: int, its: int, workers: int, out: str) -> list[str]:
    return common.launcher(
        python,
        workers + 1,
        [
            python,
            common.JOB,
            "--backend",
            "resilient",
            "--model",
            "diag",
            "--n",
            str(n),
            "--its",
            str(its),
            "--out",
            out,
        ],
    )


ENGINE_OF = {"ours": "seq", "ours_fused": "fused"}  # our runs, by E-step engine


def measure(python: str, quick: bool, workers: int = 2, reps: int | None = None) -> dict:
    reps = reps or (1 if quick else 3)
    n, its = (20_000, 4) if quick else (200_000, 6)
    cores = {"ours": workers, "ours_fused": workers, "sklearn": 1, "mixle_mp": workers}
    per = {p: [] for p in cores}
    commands = {}
    with tempfile.TemporaryDirectory(prefix="mixle_mpi_peers_") as tmp:
        for rep in range(reps):
            for peer in cores:
                out = os.path.join(tmp, f"{peer}-{rep}.json")
                cmd = (
                    ours_command(python, n, its, workers, out)
                    if peer in ENGINE_OF
                    else peer_command(python, peer, n, its, workers, out)
                )
                env = {"MIXLE_MPI_ENGINE": ENGINE_OF[peer]} if peer in ENGINE_OF else None
                commands[peer] = common.show(cmd, env, tmp=tmp)
                rec = common.run_record(
                    cmd,
                    out,
                    f"peers rep {rep + 1} {peer}",
                    env=common.job_env(env) if env else None,
                )
                if rec is not None:
                    sec = rec["median"]
                    per[peer].append(n / sec / cores[peer])
                    common.log(
                        f"peers rep {rep + 1} {peer}: {sec * 1e3:.1f} ms/it, {per[peer][-1]:,.0f} point-its/s/core"
                    )
                else:
                    per[peer].append(None)
    figures = [
        _figure(per, ours, peer, n, workers, commands)
        for ours in ENGINE_OF
        for peer in ("sklearn", "mixle_mp")
    ]
    return {"figures": figures, "raw": per}


def _figure(per: dict, ours: str, peer: str, n: int, workers: int, commands: dict) -> dict:
    ratios = [a / b for a, b in zip(per[ours], per[peer], strict=True) if a and b]
    med = statistics.median(ratios) if ratios else None
    slow = med is not None and med < 1.0
    why = {
        "sklearn": "the seq engine is mixle's own E-step, which mixle multiprocessing shares; "
        "scikit-learn computes a diagonal GMM's E-step for all components at once in a few BLAS "
        "calls (the fused engine: item 8)",
        "mixle_mp": "same computation; the difference is messaging and the extra driver rank on 2 cores",
    }[peer]
    return common.figure(
        "6",
        f"throughput per core, {ours} (engine {ENGINE_OF[ours]}) / {peer} "
        f"(diag GMM K={K} D={D}, N={n:,}, W={workers})",
        ratios,
        baseline=f"{peer}: point-iterations/s/core in the same repetition",
        target=">= 1 (per-core throughput at least scikit-learn's)"
        if peer == "sklearn"
        else ">= 1 (at least mixle multiprocessing's)",
        met=None if med is None else med >= 1.0,
        command=f"ours: `{commands.get(ours)}`; {peer}: `{commands.get(peer)}`",
        why=why if slow else "",
        throughput={p: common.spread(v) for p, v in per.items()},
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--run", choices=["sklearn", "mixle_mp"], required=True)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--its", type=int, default=6)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        sec = (
            run_sklearn(args.n, args.its)
            if args.run == "sklearn"
            else run_mixle_mp(args.n, args.its, args.workers)
        )
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump({"peer": args.run, "n": args.n, "its": args.its, "median": sec}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
