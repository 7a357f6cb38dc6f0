"""Fold E-step payloads as they arrive, in shard-id order all the same.

mixle's ``checkpointed_fold`` combines every shard's ``(count, stats)`` payload in shard-id
order once the round has them all. This does the same operations in the same order, but
each payload is combined as soon as every lower shard has been: while the round waits for
its slowest shard, the others are already folded, and the round's end only folds the tail.
The bits are those of ``checkpointed_fold`` (``tests/test_unit_fold.py``).
"""

from __future__ import annotations

import pickle
from typing import Any


class PrefixFold:
    def __init__(self, estimator: Any, num_shards: int) -> None:
        self.accumulator = estimator.accumulator_factory().make()
        self.nobs = 0.0
        self.num_shards = num_shards
        self.next = 0  # the lowest shard not folded yet
        self._waiting: dict[int, bytes] = {}  # arrived above ``next``

    def add(self, shard: int, payload: bytes) -> None:
        """Shard ``shard``'s payload (each shard once); folds every shard that can go now."""
        self._waiting[shard] = payload
        while self.next in self._waiting:
            count, stats = pickle.loads(self._waiting.pop(self.next))  # nosec B301 - this job's own workers' payloads
            self.nobs += count
            self.accumulator.combine(stats)
            self.next += 1

    def result(self) -> tuple[float, Any]:
        """``(nobs, value)`` as ``checkpointed_fold`` returns it, once every shard is in."""
        if self.next != self.num_shards:
            raise RuntimeError(
                f"fold incomplete: shards {self.next}.. of {self.num_shards} missing"
            )
        stats: dict[str, Any] = {}
        self.accumulator.key_merge(stats)
        self.accumulator.key_replace(stats)
        return self.nobs, self.accumulator.value()
