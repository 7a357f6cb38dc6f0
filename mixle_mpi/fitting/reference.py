"""The reference a resilient MPI fit must equal bit for bit: mixle's own multiprocessing
``ResilientMPEncodedData(num_workers=S, sub_chunks=k)`` on the same data, seed and start,
with the same BLAS thread count as the job's ranks (OpenBLAS splits a dot product of more
than about 10,000 terms across its threads, so a sub-chunk that large gives other bits with
2 threads than with 1)."""

from __future__ import annotations

import contextlib
import os

import numpy as np

from mixle_mpi.core.blas import pin_blas_threads

BLAS_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@contextlib.contextmanager
def blas_threads_everywhere(n: int):
    """``n`` BLAS threads in this process and in every process it starts meanwhile (mixle's
    workers read these variables when they import numpy)."""
    before = {var: os.environ.get(var) for var in BLAS_THREAD_VARS}
    os.environ.update({var: str(n) for var in BLAS_THREAD_VARS})
    try:
        with pin_blas_threads(n):
            yield
    finally:
        for var, value in before.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


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
    blas_threads: int = 1,
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
    with (
        blas_threads_everywhere(blas_threads),
        ResilientMPEncodedData(
            data,
            estimator=est,
            num_workers=num_shards,
            sub_chunks=sub_chunks,
            worker_timeout_s=REFERENCE_PHASE_TIMEOUT,
        ) as enc,
    ):
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
