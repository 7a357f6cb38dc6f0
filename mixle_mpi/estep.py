"""Per-shard computations, exactly as mixle's multiprocessing sibling does them.

Bit-identity with ``mixle.utils.parallel.resilient_em`` rests on these: the same sub-chunk
split, a fresh accumulator per shard, the same per-shard seeding, the same summation order.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import numpy as np

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


def estep_shard(estimator: Any, model: Any, chunks: Chunks, after_first: Callable[[], None] | None = None) -> bytes:
    """Pickled ``(count, accumulator.value())`` of one shard (mixle's payload format)."""
    accumulator = estimator.accumulator_factory().make()
    count = 0.0
    for sz, x in chunks:
        count += sz
        accumulator.seq_update(x, np.ones(sz), model)
        if after_first is not None:
            after_first()
            after_first = None
    return pickle.dumps((count, accumulator.value()), protocol=PROTO)


def init_shard(estimator: Any, p: float, seed: int, chunks: Chunks) -> bytes:
    """Randomized initialization of one shard from its own fixed seed."""
    accumulator = estimator.accumulator_factory().make()
    rng_loc = np.random.RandomState(seed)
    rng_w = np.random.RandomState(seed=rng_loc.randint(2**31))
    count = 0.0
    for sz, x in chunks:
        weights = np.zeros(sz, dtype=float)
        weights[rng_w.rand(sz) <= p] = 1.0
        count += np.sum(weights)
        accumulator.seq_initialize(x, weights, rng_loc)
    return pickle.dumps((count, accumulator.value()), protocol=PROTO)


def score_shard(model: Any, chunks: Chunks) -> tuple[float, float]:
    """(count, summed log density) of one shard, sub-chunks in order."""
    count, log_density = 0.0, 0.0
    for size, encoded in chunks:
        count += size
        log_density += model.seq_log_density(encoded).sum()
    return count, log_density
