"""One-pass E-step and score kernels (numba) for the common mixtures: 1-D Gaussian,
diagonal Gaussian, full-covariance Gaussian and Poisson components.

Each kernel reads a sub-chunk once and returns its log-evidence sum while it adds the
responsibility-weighted raw moments into the caller's arrays: the E-step and the score of
the same model come out of one pass. Why the bits are the same wherever a shard runs:
fixed loop order, no fastmath, no parallel reduction; where LLVM vectorizes, it does so
across components or coordinates, each lane its own scalar sum. Sums run in blocks of
``BLOCK`` rows added into the totals, which keeps rounding near a pairwise sum's.

Compiled for the CPU numba targets (``NUMBA_CPU_NAME``, ``NUMBA_CPU_FEATURES``); the
on-disk cache (``cache=True``, ``NUMBA_CACHE_DIR``) keys each entry by that target, so
ranks sharing a baseline share compiled code, and ``warm`` compiles or loads every kernel
once before a process takes work (never during a recovery).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

BLOCK = 512
_NEG_INF = -math.inf


@njit(cache=True, nogil=True)
def _posterior(lp, resp):
    """Responsibilities of one row from its joint log densities; returns its log evidence.
    A row that every component rules out gets none (and -inf), as mixle's E-step does."""
    k_n = lp.shape[0]
    top = _NEG_INF
    for k in range(k_n):
        if lp[k] > top:
            top = lp[k]
    if top == _NEG_INF:
        for k in range(k_n):
            resp[k] = 0.0
        return _NEG_INF
    total = 0.0
    for k in range(k_n):
        resp[k] = math.exp(lp[k] - top)
        total += resp[k]
    for k in range(k_n):
        resp[k] = resp[k] / total
    return top + math.log(total)


@njit(cache=True, nogil=True)
def gauss1d(x, mu, ivar, const, counts, s1, s2):
    """1-D Gaussian mixture: ``const[k]`` is log w_k - log(2 pi sigma2_k)/2."""
    k_n = mu.shape[0]
    lp = np.empty(k_n)
    resp = np.empty(k_n)
    bc, b1, b2 = np.zeros(k_n), np.zeros(k_n), np.zeros(k_n)
    ll = 0.0
    for start in range(0, x.shape[0], BLOCK):
        bll = 0.0
        for i in range(start, min(start + BLOCK, x.shape[0])):
            xi = x[i]
            for k in range(k_n):
                t = xi - mu[k]
                lp[k] = const[k] - 0.5 * (t * t * ivar[k])
            bll += _posterior(lp, resp)
            for k in range(k_n):
                r = resp[k]
                bc[k] += r
                b1[k] += r * xi
                b2[k] += r * xi * xi
        ll += bll
        for k in range(k_n):
            counts[k] += bc[k]
            s1[k] += b1[k]
            s2[k] += b2[k]
            bc[k], b1[k], b2[k] = 0.0, 0.0, 0.0
    return ll


@njit(cache=True, nogil=True)
def diag(x, mu_t, ivar_t, const, counts, s1, s2):
    """Diagonal Gaussian mixture over rows ``x`` (n, D); ``mu_t``, ``ivar_t`` are (D, K) so
    the inner loop runs over components; ``s1``, ``s2`` are (K, D)."""
    n, d_n = x.shape
    k_n = const.shape[0]
    lp, resp, quad = np.empty(k_n), np.empty(k_n), np.empty(k_n)
    xx = np.empty(d_n)
    bc, b1, b2 = np.zeros(k_n), np.zeros((k_n, d_n)), np.zeros((k_n, d_n))
    ll = 0.0
    for start in range(0, n, BLOCK):
        bll = 0.0
        for i in range(start, min(start + BLOCK, n)):
            quad[:] = 0.0
            for d in range(d_n):
                xd = x[i, d]
                xx[d] = xd * xd
                for k in range(k_n):
                    t = xd - mu_t[d, k]
                    quad[k] += t * t * ivar_t[d, k]
            for k in range(k_n):
                lp[k] = const[k] - 0.5 * quad[k]
            bll += _posterior(lp, resp)
            for k in range(k_n):
                r = resp[k]
                bc[k] += r
                for d in range(d_n):
                    b1[k, d] += r * x[i, d]
                    b2[k, d] += r * xx[d]
        ll += bll
        for k in range(k_n):
            counts[k] += bc[k]
            bc[k] = 0.0
            for d in range(d_n):
                s1[k, d] += b1[k, d]
                s2[k, d] += b2[k, d]
                b1[k, d], b2[k, d] = 0.0, 0.0
    return ll


@njit(cache=True, nogil=True)
def full(x, mu, prec, const, counts, s1, s2):
    """Full-covariance Gaussian mixture: ``prec`` (K, D, D) the precision matrices, ``const[k]``
    log w_k plus the component's normalizing constant; ``s2`` (K, D, D) the weighted outer
    products."""
    n, d_n = x.shape
    k_n = const.shape[0]
    lp, resp, diff = np.empty(k_n), np.empty(k_n), np.empty(d_n)
    bc, b1, b2 = np.zeros(k_n), np.zeros((k_n, d_n)), np.zeros((k_n, d_n, d_n))
    ll = 0.0
    for start in range(0, n, BLOCK):
        bll = 0.0
        for i in range(start, min(start + BLOCK, n)):
            for k in range(k_n):
                for a in range(d_n):
                    diff[a] = x[i, a] - mu[k, a]
                quad = 0.0
                for a in range(d_n):
                    t = 0.0
                    for b in range(d_n):
                        t += diff[b] * prec[k, b, a]
                    quad += diff[a] * t
                lp[k] = const[k] - 0.5 * quad
            bll += _posterior(lp, resp)
            for k in range(k_n):
                r = resp[k]
                bc[k] += r
                for a in range(d_n):
                    ra = r * x[i, a]
                    b1[k, a] += ra
                    for b in range(d_n):
                        b2[k, a, b] += ra * x[i, b]
        ll += bll
        for k in range(k_n):
            counts[k] += bc[k]
            bc[k] = 0.0
            for a in range(d_n):
                s1[k, a] += b1[k, a]
                b1[k, a] = 0.0
                for b in range(d_n):
                    s2[k, a, b] += b2[k, a, b]
                    b2[k, a, b] = 0.0
    return ll


@njit(cache=True, nogil=True)
def poisson(vals, log_fact, log_lam, lam, log_w, counts, sums):
    """Poisson mixture over counts ``vals`` with ``log_fact`` = log(vals!)."""
    k_n = lam.shape[0]
    lp, resp = np.empty(k_n), np.empty(k_n)
    bc, bs = np.zeros(k_n), np.zeros(k_n)
    ll = 0.0
    for start in range(0, vals.shape[0], BLOCK):
        bll = 0.0
        for i in range(start, min(start + BLOCK, vals.shape[0])):
            v = float(vals[i])
            for k in range(k_n):
                term = v * log_lam[k] if v != 0.0 else 0.0  # 0 * log(0) is 0: lambda 0 at 0
                lp[k] = term - log_fact[i] - lam[k] + log_w[k]
            bll += _posterior(lp, resp)
            for k in range(k_n):
                bc[k] += resp[k]
                bs[k] += resp[k] * v
        ll += bll
        for k in range(k_n):
            counts[k] += bc[k]
            sums[k] += bs[k]
            bc[k], bs[k] = 0.0, 0.0
    return ll


def warm() -> None:
    """Compile (or load from the cache) every kernel for the types the E-step passes."""
    one, k = np.zeros(1), np.zeros(1)
    gauss1d(np.zeros(2), one, one, k, k.copy(), k.copy(), k.copy())
    diag(
        np.zeros((2, 1)),
        np.zeros((1, 1)),
        np.zeros((1, 1)),
        k,
        k.copy(),
        np.zeros((1, 1)),
        np.zeros((1, 1)),
    )
    full(
        np.zeros((2, 1)),
        np.zeros((1, 1)),
        np.ones((1, 1, 1)),
        k,
        k.copy(),
        np.zeros((1, 1)),
        np.zeros((1, 1, 1)),
    )
    poisson(np.zeros(2, dtype=np.int64), np.zeros(2), k, k, k, k.copy(), k.copy())
