"""Built-in models with synthetic data: the demo, the chaos tests and the benchmarks use
them. Each recovers its true parameters, so a fit is meaningful as well as repeatable.

A built-in model is a spec of a family of ``fitting/modelspec.py`` (the one registry of
model families; ``fit --model`` takes the same specs) on data of a fixed number of columns,
with a generator of that data: its name (``--model hmm`` of the fit job) names this
instance, not the family."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Model:
    name: str
    describe: str
    spec: str  # a modelspec spec: the family and its parameters
    ncols: int | None  # columns of the data (None: scalar rows), which the estimator needs
    sample: Callable[[int, int], Any]  # (n, seed) -> data

    def estimator(self):
        """The spec's estimator for this model's data (what ``fit --model SPEC`` builds)."""
        from mixle_mpi.fitting import modelspec

        return modelspec.build_estimator(modelspec.parse_spec(self.spec), self.ncols)


def _gmm1d_data(n: int, seed: int):
    import mixle.stats as st

    d = st.MixtureDistribution(
        [
            st.GaussianDistribution(-3.0, 1.0),
            st.GaussianDistribution(0.5, 0.5),
            st.GaussianDistribution(4.0, 2.0),
        ],
        [0.3, 0.3, 0.4],
    )
    return d.sampler(seed=seed).sample(n)


def _diag_data(n: int, seed: int, dim: int = 4, k: int = 3):
    rng = np.random.RandomState(seed)
    centers = rng.normal(scale=4.0, size=(k, dim))
    z = rng.randint(k, size=n)
    return centers[z] + rng.normal(size=(n, dim)) * (0.5 + z[:, None] * 0.3)


def _full_data(n: int, seed: int):
    rng = np.random.RandomState(seed)
    a = rng.multivariate_normal([0, 0, 0], [[1, 0.5, 0], [0.5, 1, 0.2], [0, 0.2, 1]], size=n // 2)
    b = rng.multivariate_normal(
        [4, -2, 1], [[2, 0, 0.3], [0, 1, 0], [0.3, 0, 0.5]], size=n - n // 2
    )
    x = np.concatenate([a, b])
    return x[rng.permutation(n)]


def _poisson_data(n: int, seed: int):
    import mixle.stats as st

    d = st.MixtureDistribution(
        [st.PoissonDistribution(2.0), st.PoissonDistribution(12.0)], [0.4, 0.6]
    )
    return d.sampler(seed=seed).sample(n)


def _hmm_data(n: int, seed: int):
    import mixle.stats as st

    d = st.HiddenMarkovModelDistribution(
        [st.GaussianDistribution(-2.0, 1.0), st.GaussianDistribution(3.0, 1.0)],
        [0.6, 0.4],
        [[0.9, 0.1], [0.2, 0.8]],
        len_dist=st.PoissonDistribution(8.0),
    )
    return d.sampler(seed=seed).sample(n)


def _composite_data(n: int, seed: int):
    import mixle.stats as st

    comp = [
        st.CompositeDistribution(
            (
                st.GaussianDistribution(-2.0, 1.0),
                st.CategoricalDistribution({"a": 0.7, "b": 0.2, "c": 0.1}),
                st.PoissonDistribution(3.0),
            )
        ),
        st.CompositeDistribution(
            (
                st.GaussianDistribution(3.0, 1.5),
                st.CategoricalDistribution({"a": 0.1, "b": 0.3, "c": 0.6}),
                st.PoissonDistribution(9.0),
            )
        ),
    ]
    return st.MixtureDistribution(comp, [0.5, 0.5]).sampler(seed=seed).sample(n)


MODELS: dict[str, Model] = {
    m.name: m
    for m in (
        Model("gmm1d", "1-D Gaussian mixture, K=3", "gmm:k=3", None, _gmm1d_data),
        Model("diag", "diagonal Gaussian mixture, K=3, D=4", "gmm:k=3,cov=diag", 4, _diag_data),
        Model(
            "full", "full-covariance Gaussian mixture, K=2, D=3", "gmm:k=2,cov=full", 3, _full_data
        ),
        Model("poisson", "Poisson mixture, K=2", "poisson:k=2", None, _poisson_data),
        Model(
            "hmm",
            "2-state Gaussian HMM with Poisson lengths",
            "hmm:states=2,lengths=poisson",
            None,
            _hmm_data,
        ),
        Model(
            "composite",
            "mixture of (Gaussian, categorical, Poisson) tuples, K=2",
            "composite:k=2,parts=gaussian+categorical+poisson",
            None,
            _composite_data,
        ),
    )
}


def diag_mixture(dim: int, k: int) -> Model:
    """The ``diag`` model at another size (the benchmarks fit D=16, K=8)."""
    return Model(
        "diag",
        f"diagonal Gaussian mixture, K={k}, D={dim}",
        f"gmm:k={k},cov=diag",
        dim,
        functools.partial(_diag_data, dim=dim, k=k),
    )


def get_model(name: str) -> Model:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; valid models are {sorted(MODELS)}") from None
