"""Canonical folding: checkpointed_fold is checkpoint-invariant, and the driver folds in shard-id order.

Per-shard payloads are built exactly as the workers build them (mixle_mpi.core.estep) from
data[i::S], against a model obtained from a randomized initialization folded the same way.
"""

from __future__ import annotations

import functools
import pickle
import random

import numpy as np
import pytest

import mixle_mpi
from mixle_mpi import checkpointed_fold
from mixle_mpi.core.estep import encode_shard, estep_shard, init_shard
from mixle_mpi.fitting.models import get_model
from mixle_mpi.policy.lookahead import Lookahead
from mixle_mpi.runtime.handle import ResilientMPIEncodedData

MODELS = ["gmm1d", "diag", "poisson", "hmm", "composite"]
N, S, SEED = 300, 4, 20240607


def same_bits(a, b) -> bool:
    """Equal types and values all the way down; floats and arrays compared bit for bit."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return (
            a.dtype == b.dtype
            and a.shape == b.shape
            and (
                np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
                if a.dtype.kind != "O"
                else all(same_bits(x, y) for x, y in zip(a.ravel(), b.ravel(), strict=False))
            )
        )
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_bits(x, y) for x, y in zip(a, b, strict=False))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_bits(a[k], b[k]) for k in a)
    if isinstance(a, (float, np.floating)):
        return np.asarray(a).tobytes() == np.asarray(b).tobytes()
    return a == b


@functools.lru_cache(maxsize=None)
def setup(name: str, sub_chunks: int = 2):
    """(estimator, per-shard E-step payloads in shard order) for one built-in model."""
    m = get_model(name)
    est = m.estimator()
    data = m.sample(N, SEED)
    encoder = est.accumulator_factory().make().acc_to_encoder()
    chunks = [encode_shard(encoder, data[i::S], sub_chunks) for i in range(S)]
    init = [init_shard(est, 0.5, 1000 + i, chunks[i]) for i in range(S)]
    nobs, value = checkpointed_fold(est, init)
    model = est.estimate(nobs, value)
    payloads = [estep_shard(est, model, c) for c in chunks]
    return est, tuple(payloads)


def test_checkpointed_fold_is_reexported_from_mixle():
    from mixle.utils.parallel.resilient_em import checkpointed_fold as upstream

    assert mixle_mpi.checkpointed_fold is upstream


@pytest.mark.parametrize("name", MODELS)
def test_payloads_are_well_formed(name):
    est, payloads = setup(name)
    assert len(payloads) == S
    total = 0.0
    for raw in payloads:
        count, _ = pickle.loads(raw)
        total += count
    assert total == N


@pytest.mark.parametrize("name", MODELS)
def test_estep_payloads_are_deterministic(name):
    est, payloads = setup(name)
    again = setup.__wrapped__(name)[1]
    assert again == payloads  # byte-identical pickles


@pytest.mark.parametrize("sub_chunks", [1, 2, 3])
@pytest.mark.parametrize("name", MODELS)
def test_checkpoint_position_never_changes_the_result(name, sub_chunks):
    est, payloads = setup(name, sub_chunks)
    base = checkpointed_fold(est, list(payloads))
    assert base[0] == float(N)
    base_bytes = pickle.dumps(base, protocol=pickle.HIGHEST_PROTOCOL)
    for k in [None, *range(S)]:
        got = checkpointed_fold(est, list(payloads), checkpoint_after=k)
        assert same_bits(got, base), (name, k)
        assert pickle.dumps(got, protocol=pickle.HIGHEST_PROTOCOL) == base_bytes, (name, k)


@pytest.mark.parametrize("name", MODELS)
def test_checkpoint_after_past_the_end_is_a_plain_fold(name):
    est, payloads = setup(name)
    assert same_bits(
        checkpointed_fold(est, list(payloads), checkpoint_after=S + 5),
        checkpointed_fold(est, list(payloads)),
    )


def _bare_handle(num_shards: int) -> ResilientMPIEncodedData:
    """A handle with no MPI behind it: folding reads only num_shards (and no journal)."""
    h = object.__new__(ResilientMPIEncodedData)
    h.num_shards = num_shards
    h.journal = None
    h._estimator = None
    h._ahead = Lookahead(False)
    return h


@pytest.mark.parametrize("name", MODELS)
def test_driver_fold_uses_shard_id_order_not_arrival_order(name):
    est, payloads = setup(name)
    canonical = checkpointed_fold(est, list(payloads))
    canonical_bytes = pickle.dumps(canonical, protocol=pickle.HIGHEST_PROTOCOL)
    rng = random.Random(7)
    orders = [list(range(S)), list(reversed(range(S)))] + [
        rng.sample(range(S), S) for _ in range(8)
    ]
    for order in orders:
        h = _bare_handle(S)
        h._driver = _FakeDriver(
            {s: payloads[s] for s in order}
        )  # insertion order = "arrival" order
        got = h._folded("estep", est, (est, None))
        assert same_bits(got, canonical), (name, order)
        assert pickle.dumps(got, protocol=pickle.HIGHEST_PROTOCOL) == canonical_bytes, (name, order)


def test_fold_order_matters_so_canonical_order_is_needed():
    """Why the driver must sort: folding the same payloads in another order changes bits
    (floating-point addition is not associative) for at least some of these models."""
    differs = []
    for name in MODELS:
        est, payloads = setup(name)
        canonical = checkpointed_fold(est, list(payloads))
        reordered = checkpointed_fold(est, list(reversed(payloads)))
        assert reordered[0] == canonical[0]  # counts are exact either way
        if not same_bits(reordered, canonical):
            differs.append(name)
    assert differs, "expected at least one model whose fold depends on order"


def test_driver_fold_requires_every_shard():
    est, payloads = setup("poisson")
    h = _bare_handle(3)
    h._driver = _FakeDriver({0: payloads[0], 2: payloads[2]})
    with pytest.raises(RuntimeError, match="fold incomplete: shards 1.. of 3 missing"):
        h._folded("estep", est, (est, None))


class _FakeDriver:
    """Stands in for mixle_mpi.runtime.driver.Driver: returns the round's results in a given order."""

    def __init__(self, results):
        self.results = results
        self.calls = []

    def run_round(self, kind, payload, *extra, fold=None, **_):
        self.calls.append(kind)
        for shard, result in self.results.items():  # as the real one: each result as it arrives
            if fold is not None:
                fold(shard, result)
        return dict(self.results)


@pytest.mark.parametrize("name", ["gmm1d", "hmm"])
def test_em_step_through_handle_matches_canonical_fold(name):
    est, payloads = setup(name)
    h = _bare_handle(S)
    shuffled = {s: payloads[s] for s in (2, 0, 3, 1)}
    h._driver = _FakeDriver(shuffled)
    nobs, value = checkpointed_fold(est, list(payloads))
    expected = est.estimate(nobs, value)
    got = h.pysp_seq_estimate(est, None)
    assert h._driver.calls == ["estep"]
    assert pickle.dumps(got) == pickle.dumps(expected)
    acc = h.pysp_stream_accumulate(est, None)
    assert same_bits(acc, (nobs, value))


class _ScoringDriver(_FakeDriver):
    """A round that computes the E-step and the scores (``scores=``), results in a given
    order; a plain round otherwise."""

    def run_round(self, kind, payload, *extra, fold=None, scores=None, **_):
        if scores is None:
            self.calls.append(kind)
            for shard, (stats, _score) in self.results.items():
                fold(shard, stats)
            return {s: r[0] for s, r in self.results.items()}
        self.calls.append((kind, "scored"))
        for shard, (stats, score) in self.results.items():
            fold(shard, stats)
            scores[shard] = score
        return {s: r[0] for s, r in self.results.items()}


@pytest.mark.parametrize("name", ["gmm1d", "hmm"])
def test_an_e_step_computed_in_the_scoring_round_has_the_canonical_bits(name):
    """The scoring call's round computes the E-step of the model it scores; the E-step call
    for that model runs no round and returns the bits of a fold in shard-id order."""
    est, payloads = setup(name)
    model = get_model(name).estimator().estimate(*checkpointed_fold(est, list(payloads)))
    h = _bare_handle(S)
    h._ahead, h._estimator = Lookahead(True), est
    scores = {s: (10.0 + s, [1e16, 1.0, -1e16, 1.0][s]) for s in range(S)}
    h._driver = _ScoringDriver({s: (payloads[s], scores[s]) for s in (2, 0, 3, 1)})
    count, ll = h.pysp_seq_log_density_sum(model)
    assert (count, ll) == (sum(scores[s][0] for s in range(S)), ((1e16 + 1.0) - 1e16) + 1.0)
    got = h.pysp_seq_estimate(est, model)
    assert h._driver.calls == [("estep", "scored")]  # the E-step call ran no round
    assert pickle.dumps(got) == pickle.dumps(est.estimate(*checkpointed_fold(est, list(payloads))))
    h.pysp_seq_estimate(est, model)  # taken once: the same call again is a round of its own
    assert h._driver.calls == [("estep", "scored"), "estep"]


def test_an_e_step_for_another_model_than_the_scored_one_is_a_round_of_its_own():
    est, payloads = setup("gmm1d")
    m1 = est.estimate(*checkpointed_fold(est, list(payloads)))
    m2 = est.estimate(*checkpointed_fold(est, list(payloads[:2]) + list(payloads[:2])))
    h = _bare_handle(S)
    h._ahead, h._estimator = Lookahead(True), est
    h._driver = _ScoringDriver({s: (payloads[s], (1.0, 0.0)) for s in range(S)})
    h.pysp_seq_log_density_sum(m1)
    h.pysp_seq_estimate(est, m2)
    assert h._driver.calls == [("estep", "scored"), "estep"]
    assert h._ahead.misses == 1


def test_log_density_sum_is_summed_in_shard_order():
    # values chosen so that float addition order is visible in the result
    per_shard = {0: (1.0, 1e16), 1: (2.0, 1.0), 2: (3.0, -1e16), 3: (4.0, 1.0)}
    in_order = 0.0
    for s in range(4):
        in_order += per_shard[s][1]
    backwards = 0.0
    for s in reversed(range(4)):
        backwards += per_shard[s][1]
    assert in_order != backwards  # the test data really is order-sensitive
    h = _bare_handle(4)
    h._driver = _FakeDriver({s: per_shard[s] for s in (3, 1, 2, 0)})
    assert h.pysp_seq_log_density_sum(None) == (10.0, in_order)


def test_initialize_seeds_by_shard_and_folds_in_shard_order():
    name = "gmm1d"
    m = get_model(name)
    est = m.estimator()
    data = m.sample(N, SEED)
    encoder = est.accumulator_factory().make().acc_to_encoder()
    chunks = [encode_shard(encoder, data[i::S], 2) for i in range(S)]
    seeds = np.random.RandomState(5).randint(2**31, size=S)
    init = {s: init_shard(est, 0.5, int(seeds[s]), chunks[s]) for s in range(S)}

    class InitDriver(_FakeDriver):
        def run_round(self, kind, payload, seeds_by_shard=None, fold=None, **_):
            self.calls.append((kind, payload[1], seeds_by_shard))
            for s in (1, 3, 0, 2):
                fold(s, init[s])
            return {s: init[s] for s in (1, 3, 0, 2)}

    h = _bare_handle(S)
    h._driver = InitDriver({})
    got = h.pysp_seq_initialize(est, np.random.RandomState(5), 0.5)
    (call,) = h._driver.calls
    assert call == ("init", 0.5, {s: int(seeds[s]) for s in range(S)})
    nobs, value = checkpointed_fold(est, [init[s] for s in range(S)])
    assert pickle.dumps(got) == pickle.dumps(est.estimate(nobs, value))


@pytest.mark.parametrize("model", MODELS)
def test_folding_as_results_arrive_in_any_order_gives_checkpointed_folds_bits(model):
    """PrefixFold (the driver folds each payload once every lower shard is in) against
    mixle's checkpointed_fold over the same payloads, for arrival orders shuffled by seed."""
    from mixle_mpi.core.prefixfold import PrefixFold

    estimator, payloads = setup(model)
    want = checkpointed_fold(estimator, payloads)
    for seed in range(5):
        order = list(range(len(payloads)))
        random.Random(seed).shuffle(order)
        fold = PrefixFold(estimator, len(payloads))
        for s in order:
            fold.add(s, payloads[s])
        assert same_bits(fold.result(), want), (model, order)
    with pytest.raises(RuntimeError, match="fold incomplete"):
        PrefixFold(estimator, len(payloads)).result()


def test_the_reference_runs_with_the_jobs_blas_threads_and_leaves_the_environment_as_it_was(
    monkeypatch,
):
    """mixle's reference workers read the BLAS thread variables at their numpy import: a
    sub-chunk of more than ~10,000 rows gives other bits with 2 OpenBLAS threads than with
    the ranks' 1 (seen at N = 400,000, S = 4, 2 sub-chunks)."""
    import os

    from threadpoolctl import threadpool_info

    from mixle_mpi.fitting.reference import BLAS_THREAD_VARS, blas_threads_everywhere

    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    with blas_threads_everywhere(1):
        assert all(os.environ[var] == "1" for var in BLAS_THREAD_VARS)
        assert all(pool["num_threads"] == 1 for pool in threadpool_info())
    assert os.environ["OPENBLAS_NUM_THREADS"] == "2" and "OMP_NUM_THREADS" not in os.environ
