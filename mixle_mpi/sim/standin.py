"""A cheap stand-in for a mixle estimator, encoder and model, with mixle's interfaces.

Its E-step is a sum of floats whose bits depend on the order of every addition, so a shard
folded twice, out of order or from the wrong process changes the result: the simulation
compares bits, as the real tests do.
"""

from __future__ import annotations

import math

import numpy as np


class Encoder:
    def seq_encode(self, rows) -> np.ndarray:
        return np.asarray(rows, dtype=float)


class Model:
    def __init__(self, theta: float) -> None:
        self.theta = theta

    def seq_log_density(self, x: np.ndarray) -> np.ndarray:
        return np.cos(x * self.theta)


class Accumulator:
    def __init__(self) -> None:
        self.total = 0.0

    def seq_update(self, x: np.ndarray, weights: np.ndarray, model: Model) -> None:
        self.total += float(np.dot(np.sin(x * model.theta), weights))

    def seq_initialize(self, x: np.ndarray, weights: np.ndarray, rng) -> None:
        self.total += float(np.dot(x, weights)) + rng.rand()

    def value(self) -> float:
        return self.total

    def combine(self, stats: float) -> None:
        self.total = self.total * (1.0 + 1e-9) + stats  # order-sensitive on purpose

    def key_merge(self, stats: dict) -> None:
        pass

    def key_replace(self, stats: dict) -> None:
        pass


class Factory:
    def make(self) -> Accumulator:
        return Accumulator()


class Estimator:
    def accumulator_factory(self) -> Factory:
        return Factory()


def model_of_round(r: int) -> Model:
    """Round ``r``'s model: a different one each round, as EM's iterations are."""
    return Model(1.0 + 0.1 * r + math.pi / 100)
