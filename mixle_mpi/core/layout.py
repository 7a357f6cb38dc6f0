"""The default number of shards, from the data alone.

Shards fix the bits of a fit (results fold in shard-id order), so the default must not
depend on how many ranks a job gets: the same data gives the same shards, and so the same
model, on 3, 5 or 65 ranks. Over-decomposition (more shards than workers) also spreads a dead
worker's shards over every survivor. ``--num-shards`` pins S across versions of this rule.
"""

from __future__ import annotations

ROWS_PER_SHARD = 10_000  # about this many rows per shard between the two bounds
MIN_SHARDS, MAX_SHARDS = 16, 256


def default_num_shards(rows: int) -> int:
    """ceil(rows / 10,000) kept within [16, 256], and never more shards than rows."""
    want = min(MAX_SHARDS, max(MIN_SHARDS, -(-rows // ROWS_PER_SHARD)))
    return max(1, min(rows, want))
