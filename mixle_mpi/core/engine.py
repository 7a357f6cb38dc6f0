"""Which code computes a shard's E-step and score: mixle's ``seq_*`` path or a fused kernel.

``seq`` is mixle's own path, bit for bit its multiprocessing backend's. ``fused`` (and
``auto``, which picks it wherever a kernel exists) runs ``core.kernels``: one pass gives the
E-step's payload, in the structure mixle's accumulator ``value()`` has, and the score. A
model without a kernel, or an estimator whose payload the kernel would not reproduce
(another accumulator, compensated sums), stays on ``seq``. Every choice here depends only
on the model, the estimator and the shard's data, never on which process runs the shard.

Accuracy: the kernels emit raw moments, as mixle's accumulators do on well-conditioned
data. Where a sub-chunk's moments are ill-conditioned (|mean| large against the spread, the
case mixle answers with its shift-anchored moments), the E-step payload of that shard is
computed by ``seq`` instead (``RATIO`` is stricter than mixle's own gate); the score always
comes from the kernel, so it is the same in every round that asks for it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

ENGINES = ("auto", "seq", "fused")
RATIO = 1.0e5  # mean^2 / spread^2 above which a sub-chunk's raw moments are not trusted
_LOG_2PI = math.log(2.0 * math.pi)
_FAMILIES = {  # component distribution -> (kernel family, component accumulator)
    "GaussianDistribution": ("gauss1d", "GaussianAccumulator"),
    "DiagonalGaussianDistribution": ("diag", "DiagonalGaussianAccumulator"),
    "PoissonDistribution": ("poisson", "PoissonAccumulator"),
    "MultivariateGaussianDistribution": ("full", "MultivariateGaussianAccumulator"),
}


def check(engine: str) -> str:
    """The engine's name, checked (ValueError names the choices)."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}; found {engine!r}")
    return engine


def warm(engine: str) -> None:
    """Compile or load the kernels now, at startup, if ``engine`` may use them."""
    if check(engine) != "seq":
        from mixle_mpi.core import kernels

        kernels.warm()


def model_family(model: Any) -> str | None:
    """The kernel family of a mixture whose components are all of one supported type."""
    if type(model).__name__ != "MixtureDistribution":
        return None
    names = {type(c).__name__ for c in model.components}
    if len(names) != 1:
        return None
    entry = _FAMILIES.get(names.pop())
    if entry and entry[0] == "full" and any(c.use_lstsq for c in model.components):
        return None  # a singular covariance: mixle scores it its own way
    return entry[0] if entry else None


def payload_fits(estimator: Any, family: str) -> bool:
    """Whether the estimator's accumulator has the plain payload the kernel builds."""
    acc = estimator.accumulator_factory().make()
    if type(acc).__name__ != "MixtureAccumulator":
        return False
    want = {fam: acc_name for fam, acc_name in _FAMILIES.values()}[family]
    return all(
        type(a).__name__ == want and not getattr(a, "compensated", False) for a in acc.accumulators
    )


def kernel_for(engine: str, model: Any) -> str | None:
    """The kernel family that scores this model under ``engine``, or None for ``seq``; it
    computes the E-step too where ``payload_fits``. The score never depends on the
    estimator, so every round that scores a model gets the same bits."""
    if check(engine) == "seq":
        return None
    return model_family(model)


def _params(family: str, model: Any) -> tuple:
    comps, log_w = model.components, np.asarray(model.log_w, dtype=np.float64)
    if family == "gauss1d":
        sigma2 = np.array([c.sigma2 for c in comps], dtype=np.float64)
        mu = np.array([c.mu for c in comps], dtype=np.float64)
        return mu, 1.0 / sigma2, log_w - 0.5 * (_LOG_2PI + np.log(sigma2))
    if family == "diag":
        covar = np.array([c.covar for c in comps], dtype=np.float64)
        mu = np.array([c.mu for c in comps], dtype=np.float64)
        const = log_w - 0.5 * (covar.shape[1] * _LOG_2PI + np.log(covar).sum(axis=1))
        return np.ascontiguousarray(mu.T), np.ascontiguousarray((1.0 / covar).T), const
    if family == "full":
        mu = np.array([c.mu for c in comps], dtype=np.float64)
        prec = np.array([c.inv_covar for c in comps], dtype=np.float64)
        return mu, prec, log_w + np.array([c.chol_const for c in comps], dtype=np.float64)
    lam = np.array([c.lam for c in comps], dtype=np.float64)
    return np.array([c.log_lambda for c in comps], dtype=np.float64), lam, log_w


def _stats(family: str, k: int, x: Any) -> tuple:
    if family == "full":
        d = x.shape[1]
        return np.zeros(k), np.zeros((k, d)), np.zeros((k, d, d))
    if family == "diag":
        d = x.shape[1]
        return np.zeros(k), np.zeros((k, d)), np.zeros((k, d))
    if family == "poisson":
        return np.zeros(k), np.zeros(k)
    return np.zeros(k), np.zeros(k), np.zeros(k)


def _run(family: str, params: tuple, x: Any, stats: tuple) -> float:
    from mixle_mpi.core import kernels  # numba: imported where a kernel runs

    if family == "poisson":
        vals = np.ascontiguousarray(x[0], dtype=np.int64)
        return kernels.poisson(vals, np.ascontiguousarray(x[1], dtype=np.float64), *params, *stats)
    fn = {"diag": kernels.diag, "full": kernels.full, "gauss1d": kernels.gauss1d}[family]
    return fn(np.ascontiguousarray(x, dtype=np.float64), *params, *stats)


def ill_conditioned(counts, s1, s2) -> bool:
    """mixle's conditioning question, stricter: would a component's raw variance lose digits?"""
    live = counts > 0.0
    if not np.any(live):
        return False
    c = counts[live].reshape((-1,) + (1,) * (s1.ndim - 1))
    m = s1[live] / c
    spread2 = s2[live] / c - m * m
    return bool(np.any(spread2 <= 0.0) or np.any(m * m > RATIO * spread2))


def _diagonal(family: str, stats: tuple) -> tuple:
    """Counts, sums and each coordinate's sum of squares (a full model's diagonal)."""
    if family != "full":
        return stats
    return stats[0], stats[1], np.diagonal(stats[2], axis1=1, axis2=2)


def _value(family: str, stats: tuple) -> tuple:
    """The mixture accumulator's ``value()``: component counts, then each component's."""
    counts = stats[0]
    if family == "poisson":
        comps = tuple((np.float64(c), np.float64(s)) for c, s in zip(counts, stats[1], strict=True))
    elif family in ("diag", "full"):
        comps = tuple(
            (s1.copy(), s2.copy(), float(c)) for c, s1, s2 in zip(counts, *stats[1:], strict=True)
        )
    else:
        comps = tuple(
            (np.float64(a), np.float64(b), np.float64(c), np.float64(c))
            for c, a, b in zip(counts, *stats[1:], strict=True)
        )
    return counts.copy(), comps


def fused_shard(family: str, model: Any, chunks, on_chunk=None) -> tuple:
    """``(value or None, count, log-density sum)`` of one shard in one pass, sub-chunks in
    order. The value is None where a sub-chunk is ill-conditioned (``seq`` computes it)."""
    params = _params(family, model)
    k = len(model.components)
    total, trusted = None, family == "poisson"
    count, ll = 0.0, 0.0
    ok = True
    for i, (size, x) in enumerate(chunks):
        stats = _stats(family, k, x)
        ll += _run(family, params, x, stats)
        count += size
        if not trusted and ill_conditioned(*_diagonal(family, stats)):
            ok = False
        total = stats if total is None else tuple(t + s for t, s in zip(total, stats, strict=True))
        if on_chunk is not None:
            on_chunk(i)
    value = _value(family, total) if ok and total is not None else None
    return value, count, ll
