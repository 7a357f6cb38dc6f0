"""The reference a resilient MPI fit must equal bit for bit: mixle's own multiprocessing
``ResilientMPEncodedData(num_workers=S, sub_chunks=k)`` on the same data, seed and start
(engine ``seq``); for another engine, ``ShardsInProcess``: the same shards, seeds, fold and
order in one process, each shard computed by ``core.estep`` with that engine. Either runs
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
    engine: str | None = None,
) -> dict:
    """``engine`` None: mixle's own backend; else ``ShardsInProcess`` with that engine."""
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
        (
            ResilientMPEncodedData(
                data,
                estimator=est,
                num_workers=num_shards,
                sub_chunks=sub_chunks,
                worker_timeout_s=REFERENCE_PHASE_TIMEOUT,
            )
            if engine is None
            else ShardsInProcess(data, est, num_shards, sub_chunks, engine)
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


class ShardsInProcess:
    """mixle's EM data handle in one process: shard i = rows i::S, sub-chunks, the shard's
    own init seed, payloads folded in shard order (``checkpointed_fold``), scores added in
    shard order; each shard computed by ``estep.shard_result`` with ``engine``. With
    ``seq`` its bits are mixle's multiprocessing backend's (a test checks it), so with
    another engine they are what a resilient fit with that engine must give."""

    def __init__(self, data, estimator, num_shards: int, sub_chunks: int, engine: str) -> None:
        from mixle_mpi.core import estep

        enc = estimator.accumulator_factory().make().acc_to_encoder()
        self.shards = [
            estep.encode_shard(enc, data[i::num_shards], sub_chunks) for i in range(num_shards)
        ]
        self.engine, self.size = engine, len(data)

    def _fold(self, estimator, payloads):
        from mixle.utils.parallel.resilient_em import checkpointed_fold

        return estimator.estimate(*checkpointed_fold(estimator, payloads))

    def pysp_seq_initialize(self, estimator, rng, p):
        from mixle_mpi.core import estep

        seeds = rng.randint(2**31, size=len(self.shards))
        return self._fold(
            estimator,
            [
                estep.init_shard(estimator, p, int(s), c)
                for s, c in zip(seeds, self.shards, strict=True)
            ],
        )

    def pysp_seq_estimate(self, estimator, prev_estimate):
        from mixle_mpi.core import estep

        body = (estimator, prev_estimate)
        return self._fold(
            estimator,
            [estep.shard_result("estep", body, c, engine=self.engine) for c in self.shards],
        )

    def pysp_seq_log_density_sum(self, estimate):
        from mixle_mpi.core import estep

        count, ll = 0.0, 0.0
        for chunks in self.shards:
            c, x = estep.shard_result("llsum", estimate, chunks, engine=self.engine)
            count, ll = count + c, ll + x
        return count, ll

    def __len__(self) -> int:
        return self.size

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None
