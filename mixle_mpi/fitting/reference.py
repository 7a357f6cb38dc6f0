"""The reference a resilient MPI fit must equal bit for bit: mixle's own multiprocessing
``ResilientMPEncodedData(num_workers=S, sub_chunks=k)`` on the same data, seed and start."""

from __future__ import annotations

import numpy as np

REFERENCE_PHASE_TIMEOUT = 600.0  # seconds per distributed phase of mixle's own reference fit


def reference_fit(
    model_name: str,
    n: int,
    data_seed: int,
    seed: int,
    num_shards: int,
    sub_chunks: int = 1,
    max_its: int = 10,
    init_p: float = 0.1,
) -> dict:
    import warnings

    from mixle.inference.estimation import optimize
    from mixle.utils.parallel.resilient_em import ResilientMPEncodedData

    from mixle_mpi.fitting.models import get_model

    model = get_model(model_name)
    est = model.estimator()
    data = model.sample(n, data_seed)
    lls: list[float] = []
    # a generous phase deadline: the reference runs beside MPI jobs on a loaded machine, and
    # mixle's default (30 s) is a failure there, not a hang it must catch
    with ResilientMPEncodedData(
        data,
        estimator=est,
        num_workers=num_shards,
        sub_chunks=sub_chunks,
        worker_timeout_s=REFERENCE_PHASE_TIMEOUT,
    ) as enc:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fitted = optimize(
                None,
                est,
                enc_data=enc,
                max_its=max_its,
                init_p=init_p,
                rng=np.random.RandomState(seed),
                on_step=lambda s: lls.append(float(s.log_density)),
            )
    return {"model": fitted.to_json(), "ll": lls, "iterations": len(lls)}
