"""The E-step engines without MPI: which engine computes which model, the fused kernels'
payload against mixle's own (structure, values, bits that repeat), and accuracy at data
offsets 0, 1e6 and 1e9 for every engine."""

from __future__ import annotations

import pickle

import mixle.stats as st
import numpy as np
import pytest

from mixle_mpi.core import engine, estep
from mixle_mpi.core.errors import ConfigError
from mixle_mpi.core.settings import Settings

ENGINES = ("seq", "fused", "auto")


def gmm1d(offset=0.0):
    est = st.MixtureEstimator([st.GaussianEstimator()] * 2)
    model = st.MixtureDistribution(
        [st.GaussianDistribution(offset - 3.0, 1.0), st.GaussianDistribution(offset + 3.0, 0.25)],
        [0.4, 0.6],
    )
    return est, model


def diag(offset=0.0):
    est = st.MixtureEstimator([st.DiagonalGaussianEstimator(dim=3)] * 2)
    model = st.MixtureDistribution(
        [
            st.DiagonalGaussianDistribution(offset + np.array([-3.0, 0.0, 1.0]), np.ones(3)),
            st.DiagonalGaussianDistribution(offset + np.array([3.0, 1.0, -1.0]), np.full(3, 0.5)),
        ],
        [0.5, 0.5],
    )
    return est, model


def full(offset=0.0):
    est = st.MixtureEstimator([st.MultivariateGaussianEstimator(dim=2)] * 2)
    cov = np.array([[1.0, 0.5], [0.5, 2.0]])
    model = st.MixtureDistribution(
        [
            st.MultivariateGaussianDistribution(offset + np.array([-3.0, 0.0]), cov),
            st.MultivariateGaussianDistribution(offset + np.array([3.0, 1.0]), 0.5 * cov),
        ],
        [0.5, 0.5],
    )
    return est, model


def poisson(offset=0.0):
    est = st.MixtureEstimator([st.PoissonEstimator()] * 2)
    model = st.MixtureDistribution(
        [st.PoissonDistribution(2.0), st.PoissonDistribution(9.0)], [0.3, 0.7]
    )
    return est, model


FAMILIES = {"gauss1d": gmm1d, "diag": diag, "full": full, "poisson": poisson}


def shard(make, offset=0.0, n=4000, sub=3):
    est, model = make(offset)
    rows = model.sampler(seed=5).sample(n)
    enc = est.accumulator_factory().make().acc_to_encoder()
    return est, model, estep.encode_shard(enc, rows, sub)


def run(eng, est, model, chunks):
    payload, score = estep.shard_result("estep", (est, model), chunks, scores=True, engine=eng)
    return pickle.loads(payload), score


def test_engine_names_are_checked():
    assert engine.check("auto") == "auto"
    with pytest.raises(ValueError, match="auto, seq, fused"):
        engine.check("fast")
    with pytest.raises(ConfigError, match="engine must be one of"):
        Settings(engine="fast")
    assert Settings().engine == "seq"
    assert Settings.resolve(environ={"MIXLE_MPI_ENGINE": "fused"}).engine == "fused"


@pytest.mark.parametrize("family", FAMILIES)
def test_which_kernel_computes_which_model(family):
    est, model = FAMILIES[family]()
    assert engine.kernel_for("seq", model) is None
    assert engine.kernel_for("fused", model) == engine.kernel_for("auto", model) == family
    assert engine.payload_fits(est, family)


def test_models_without_a_kernel_stay_on_seq():
    g = st.GaussianDistribution(0.0, 1.0)
    mixed = st.MixtureDistribution([g, st.PoissonDistribution(1.0)], [0.5, 0.5])
    for model in (g, mixed):
        assert engine.kernel_for("auto", model) is None
    compensated = st.MixtureEstimator([st.GaussianEstimator(compensated=True)] * 2)
    assert not engine.payload_fits(compensated, "gauss1d")
    hmm = st.HiddenMarkovModelEstimator([st.GaussianEstimator()] * 2)
    assert not engine.payload_fits(hmm, "gauss1d")


def same_structure(a, b):
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(same_structure, a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.shape == b.shape
    return np.isscalar(a) and np.isscalar(b)


def close(a, b, rtol):
    if isinstance(a, tuple):
        return all(close(x, y, rtol) for x, y in zip(a, b, strict=True))
    return np.allclose(a, b, rtol=rtol, atol=0.0)


@pytest.mark.parametrize("family", FAMILIES)
def test_fused_payload_is_mixles_structure_and_values(family):
    """The same ``value()`` structure as mixle's accumulator, the same numbers to rounding,
    the same score; the kernel's bits repeat, and a score-only round gives the same score."""
    est, model, chunks = shard(FAMILIES[family])
    (c_seq, v_seq), s_seq = run("seq", est, model, chunks)
    first = estep.shard_result("estep", (est, model), chunks, scores=True, engine="fused")
    (c_fus, v_fus), s_fus = pickle.loads(first[0]), first[1]
    assert c_seq == c_fus and same_structure(v_seq, v_fus)
    assert close(v_seq, v_fus, 1e-11) and s_seq[1] == pytest.approx(s_fus[1], rel=1e-12)
    again = estep.shard_result("estep", (est, model), chunks, scores=True, engine="fused")
    assert again == first
    assert estep.shard_result("llsum", model, chunks, engine="fused") == s_fus
    est.estimate(c_fus, v_fus)  # mixle's M-step takes it


@pytest.mark.parametrize("eng", ENGINES)
@pytest.mark.parametrize("offset", [0.0, 1e6, 1e9])
@pytest.mark.parametrize("family", ["gauss1d", "diag", "full"])
def test_accuracy_at_offsets(family, offset, eng):
    """One EM step from the true model: the fitted variances and means are the ones at offset
    0 (shifted), to 1e-6, for every engine. Raw moments alone would lose the variance at 1e9."""
    fitted = []
    for off in (0.0, offset):
        est, model, chunks = shard(FAMILIES[family], off)
        (count, value), score = run(eng, est, model, chunks)
        m = est.estimate(count, value)
        fitted.append(
            [(np.asarray(getattr(c, "sigma2", getattr(c, "covar", 0))), c.mu) for c in m.components]
        )
        assert np.isfinite(score[1])
    for (v0, mu0), (v1, mu1) in zip(fitted[0], fitted[1], strict=True):
        np.testing.assert_allclose(v1, v0, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(mu1) - offset, mu0, atol=1e-6 * max(1.0, offset))


def test_ill_conditioned_shard_falls_back_to_seq_bits():
    est, model, chunks = shard(gmm1d, 1e9)
    assert engine.fused_shard("gauss1d", model, chunks)[0] is None
    seq = estep.shard_result("estep", (est, model), chunks, engine="seq")
    assert estep.shard_result("estep", (est, model), chunks, engine="fused") == seq


def test_in_process_reference_is_mixles_backend_with_seq():
    """``ShardsInProcess`` with ``seq`` is bit for bit mixle's multiprocessing backend, so
    with ``fused`` it is the reference a fused resilient fit must equal."""
    from mixle_mpi.fitting.reference import reference_fit

    args = ("gmm1d", 2000, 1, 7, 3)
    mixle = reference_fit(*args, sub_chunks=2, max_its=3)
    ours = reference_fit(*args, sub_chunks=2, max_its=3, engine="seq")
    assert ours == mixle
    fused = reference_fit(*args, sub_chunks=2, max_its=3, engine="fused")
    assert fused["ll"] != mixle["ll"]
    np.testing.assert_allclose(fused["ll"], mixle["ll"], rtol=1e-9)


def test_warm_compiles_every_signature_a_round_uses():
    """After ``warm`` (a rank's setup), no E-step compiles: each kernel keeps its signatures."""
    from mixle_mpi.core import kernels

    engine.warm("auto")
    fns = (kernels.gauss1d, kernels.diag, kernels.full, kernels.poisson)
    before = [len(f.signatures) for f in fns]
    for make in FAMILIES.values():
        est, model, chunks = shard(make, n=300)
        run("fused", est, model, chunks)
    assert [len(f.signatures) for f in fns] == before == [1, 1, 1, 1]
