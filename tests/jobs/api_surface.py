"""Drives every entry point a handle serves (seq_initialize, seq_estimate,
seq_log_density_sum, streaming_accumulate, best_of) and records exact results. Run under
MPI it uses ResilientMPIEncodedData; the test calls ``exercise`` on mixle's own handle."""

import json
import pickle
import sys
import warnings

import numpy as np


def exercise(enc, est) -> dict:
    from mixle.inference.estimation import best_of
    from mixle.inference.streaming import streaming_accumulate
    from mixle.stats.compute.sequence import seq_estimate, seq_initialize, seq_log_density_sum

    m0 = seq_initialize(enc, est, np.random.RandomState(3), 0.2)
    m1 = seq_estimate(enc, est, m0)
    count, ll = seq_log_density_sum(enc, m1)
    stream = streaming_accumulate(enc, est, m1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        best_ll, best = best_of(
            None, None, est, 2, 3, 0.1, 1e-9, rng=np.random.RandomState(5), enc_data=enc
        )
    return {
        "m0": m0.to_json(),
        "m1": m1.to_json(),
        "count": repr(count),
        "ll": repr(ll),
        "stream": pickle.dumps(stream, protocol=4).hex(),
        "best_ll": repr(best_ll),
        "best": best.to_json(),
    }


def main() -> None:
    from mixle_mpi import ResilientMPIEncodedData, is_driver
    from mixle_mpi.fitting.models import get_model

    model, n, shards, out, workdir = (
        sys.argv[1],
        int(sys.argv[2]),
        int(sys.argv[3]),
        sys.argv[4],
        sys.argv[5],
    )
    m = get_model(model)
    est = m.estimator()
    data = m.sample(n, 1) if is_driver() else None
    with ResilientMPIEncodedData(data, estimator=est, num_shards=shards, workdir=workdir) as enc:
        result = exercise(enc, est)
        result["rounds"] = enc.rounds
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    main()
