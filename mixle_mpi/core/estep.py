"""Per-shard computations, exactly as mixle's multiprocessing sibling does them.

Bit-identity with ``mixle.utils.parallel.resilient_em`` rests on these: the same sub-chunk
split, a fresh accumulator per shard, the same per-shard seeding, the same summation order.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import numpy as np

from mixle_mpi.core import engine as engines
from mixle_mpi.core import probes

PROTO = pickle.HIGHEST_PROTOCOL

Chunks = list[tuple[int, Any]]


def encode_shard(encoder: Any, rows, sub_chunks: int) -> Chunks:
    """Sub-chunk j of a shard is ``rows[j::k]``, each encoded separately."""
    n = len(rows)
    k = max(1, min(int(sub_chunks), n)) if n else 1
    chunks: Chunks = []
    for i in range(k):
        part = [rows[j] for j in range(i, n, k)]
        if part:
            chunks.append((len(part), encoder.seq_encode(part)))
    return chunks


OnChunk = Callable[[int], None]  # called with a sub-chunk's index once it is done


def _done(on_chunk: OnChunk | None, index: int) -> None:
    if on_chunk is not None:
        on_chunk(index)


@probes.spanned("estep_shard")
def estep_shard(
    estimator: Any, model: Any, chunks: Chunks, on_chunk: OnChunk | None = None
) -> bytes:
    """Pickled ``(count, accumulator.value())`` of one shard (mixle's payload format)."""
    accumulator = estimator.accumulator_factory().make()
    count = 0.0
    for i, (sz, x) in enumerate(chunks):
        count += sz
        accumulator.seq_update(x, np.ones(sz), model)
        _done(on_chunk, i)
    return pickle.dumps((count, accumulator.value()), protocol=PROTO)


def init_shard(
    estimator: Any, p: float, seed: int, chunks: Chunks, on_chunk: OnChunk | None = None
) -> bytes:
    """Randomized initialization of one shard from its own fixed seed."""
    accumulator = estimator.accumulator_factory().make()
    rng_loc = np.random.RandomState(seed)
    rng_w = np.random.RandomState(seed=rng_loc.randint(2**31))
    count = 0.0
    for i, (sz, x) in enumerate(chunks):
        weights = np.zeros(sz, dtype=float)
        weights[rng_w.rand(sz) <= p] = 1.0
        count += np.sum(weights)
        accumulator.seq_initialize(x, weights, rng_loc)
        _done(on_chunk, i)
    return pickle.dumps((count, accumulator.value()), protocol=PROTO)


@probes.spanned("score_shard")
def score_shard(model: Any, chunks: Chunks, on_chunk: OnChunk | None = None) -> tuple[float, float]:
    """(count, summed log density) of one shard, sub-chunks in order."""
    count, log_density = 0.0, 0.0
    for i, (size, encoded) in enumerate(chunks):
        count += size
        log_density += model.seq_log_density(encoded).sum()
        _done(on_chunk, i)
    return count, log_density


Ahead = Callable[[bytes], bool]  # offered an E-step payload before the scores; True: it took it


def _fused_estep(family, estimator, model, chunks, on_chunk) -> tuple[bytes, tuple]:
    """A kernel's payload and score in one pass; ``seq``'s payload where it declines."""
    value, count, ll = engines.fused_shard(family, model, chunks, on_chunk)
    if value is None:
        return estep_shard(estimator, model, chunks, on_chunk), (count, ll)
    return pickle.dumps((count, value), protocol=PROTO), (count, ll)


def shard_result(
    kind: str,
    body: Any,
    chunks: Chunks,
    extra: Any = None,
    scores: bool = False,
    on_chunk: OnChunk | None = None,
    ahead: Ahead | None = None,
    engine: str = "seq",
) -> Any:
    """One shard's result for a round of ``kind``, wherever it is computed (a worker's task,
    or the driver's own share): ``estep`` (and, with ``scores``, the score of the same
    model after it, as mixle's EM loop asks for both), ``init`` with the shard's seed
    ``extra``, or ``llsum``. With ``scores``, ``ahead`` is offered the E-step payload
    before the scores are computed; if it takes it (a worker sends it ahead,
    ``protocol.Stats``), the result carries ``None`` in its place. ``engine`` (``core.engine``)
    says whether a fused kernel computes the E-step and the score, in one pass."""
    if kind == "estep":
        estimator, model = body
        family = engines.kernel_for(engine, model)
        if family is not None and engines.payload_fits(estimator, family):
            result, score = _fused_estep(family, estimator, model, chunks, on_chunk)
        else:
            result, score = estep_shard(estimator, model, chunks, on_chunk), None
        if not scores:
            return result
        if ahead is not None and ahead(result):
            result = None
        return result, score if score is not None else _score(family, model, chunks, on_chunk)
    if kind == "init":
        estimator, p = body
        return init_shard(estimator, p, int(extra), chunks, on_chunk)
    return _score(engines.kernel_for(engine, body), body, chunks, on_chunk)


def _score(family: str | None, model: Any, chunks: Chunks, on_chunk: OnChunk | None):
    """(count, log-density sum): the kernel's where one scores the model, else ``seq``'s."""
    if family is None:
        return score_shard(model, chunks, on_chunk)
    return engines.fused_shard(family, model, chunks, on_chunk)[1:]
