"""Computing the next E-step in the scoring round: one round per EM iteration instead of two.

mixle's EM loop scores each new model (``seq_log_density_sum``) and then runs the E-step on
that same model with the same estimator (``seq_estimate``). Each call is a round: a fixed
cost of messaging, waking and folding that short rounds feel (issue 15). So a scoring round
also computes, shard by shard, the E-step of the model it scores, with the estimator of the
last E-step or initialization; the E-step call that follows with the same estimator and
model (the same pickled bytes, so the same computation on the workers) takes those results
and sends nothing. The bits are those of a separate E-step round.

A guess that does not come true costs one E-step's compute; after ``MISSES_ALLOWED`` of
them the guess is given up for the rest of the fit. The last scoring of a fit is always
such a loss, once. Pure: the caller does the rounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MISSES_ALLOWED = 2


@dataclass
class Lookahead:
    on: bool
    key: bytes | None = (
        None  # the pickled (estimator, model) the last scoring round computed the E-step of
    )
    value: Any = None  # that E-step's results (the caller's)
    hits: int = 0
    misses: int = 0

    def wanted(self, have_estimator: bool, saving: bool) -> bool:
        """Whether a scoring round should compute the E-step too: there is an estimator to
        compute it with, and no checkpoint is ``saving`` after this scoring (nor a fold
        journal after every round). A checkpoint of iteration k is written after its
        scoring: computed ahead, E-step k+1 would run before it is on disk, and a driver
        death then would cost one more E-step on resume. Checkpoints come every minute by
        default (fitting/cadence.py), so all other iterations keep the round this saves."""
        return self.on and have_estimator and not saving

    def computed(self, key: bytes, value: Any) -> None:
        self.key, self.value = key, value

    def take(self, key: bytes) -> Any:
        """An E-step call for ``key``: the results computed ahead for it, or None (then a
        round computes it; a guess for another key was lost)."""
        ahead, value = self.key, self.value
        self.key = self.value = None
        if ahead is None:
            return None
        if ahead == key:
            self.hits += 1
            return value
        self.misses += 1
        if self.misses >= MISSES_ALLOWED:
            self.on = False
        return None
