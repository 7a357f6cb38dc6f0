"""Failure-free soak: run E-step rounds for --seconds at the default heartbeat settings and
count false failure detections (there should be none).

    python -m mixle_mpi run -n 5 -- python bench/soak.py --seconds 600
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    from mixle_mpi import ResilientMPIEncodedData, is_driver
    from mixle_mpi.fitting.models import get_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--model", default="gmm1d")
    ap.add_argument("--n", type=int, default=400_000)
    ap.add_argument("--out", default="bench/results/soak.json")
    args = ap.parse_args()
    m = get_model(args.model)
    est = m.estimator()
    data = m.sample(args.n, 1) if is_driver() else None
    with ResilientMPIEncodedData(data, estimator=est, num_shards=8) as enc:
        model = enc.pysp_seq_initialize(est, np.random.RandomState(1), 0.1)
        t0, rounds = time.monotonic(), 0
        while time.monotonic() - t0 < args.seconds:
            enc.pysp_seq_estimate(est, model)  # same model each time: a steady load
            enc.pysp_seq_log_density_sum(model)
            rounds += 1
        failures = sum(len(r["failed"]) for r in enc.rounds)
        report = {
            "seconds": time.monotonic() - t0,
            "iterations": rounds,
            "false_failures": failures,
            "settings": enc.settings.__dict__,
            "workers": enc.membership.live(),
        }
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=1)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
