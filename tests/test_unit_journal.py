"""The fold journal and the type-exact value codec, without MPI."""

from __future__ import annotations

import numpy as np
import pytest

from mixle_mpi import checkpointed_fold
from mixle_mpi.core import estep
from mixle_mpi.core.codec import decode_value, encode_value
from mixle_mpi.fitting.models import MODELS
from mixle_mpi.storage.journal import FoldJournal


def _payloads(name: str):
    m = MODELS[name]
    est = m.estimator()
    d = m.sample(400, 1)
    enc = est.accumulator_factory().make().acc_to_encoder()
    shards = [estep.encode_shard(enc, d[i::4], 2) for i in range(4)]
    model = est.estimate(
        *checkpointed_fold(
            est, [estep.init_shard(est, 0.5, 3 + i, c) for i, c in enumerate(shards)]
        )
    )
    return est, model, [estep.estep_shard(est, model, c) for c in shards]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_journaled_payloads_fold_to_the_same_model(name, tmp_path):
    est, model, pays = _payloads(name)
    j = FoldJournal(str(tmp_path / "round.h5"), "data")
    assert j.begin("k1") == {}
    j.record(1, pays[1])
    j.record(3, pays[3])
    j.close()
    found = FoldJournal(str(tmp_path / "round.h5"), "data").begin("k1")
    assert sorted(found) == [1, 3]
    mixed = [pays[0], found[1], pays[2], found[3]]
    assert (
        est.estimate(*checkpointed_fold(est, mixed)).to_json()
        == est.estimate(*checkpointed_fold(est, pays)).to_json()
    )


def test_other_round_or_damage_means_recompute(tmp_path):
    est, model, pays = _payloads("gmm1d")
    path = str(tmp_path / "round.h5")
    j = FoldJournal(path, "data")
    j.begin("k1")
    j.record(0, pays[0])
    j.close()
    assert FoldJournal(path, "data").begin("k2") == {}  # another round: start afresh
    open(path, "wb").write(b"half a file")
    assert FoldJournal(path, "data").begin("k2") == {}  # unreadable: recompute everything


def test_a_journal_of_the_same_round_over_other_data_is_never_folded(tmp_path):
    """A rerun after the data changed (same estimator, same model) recomputes every shard:
    the round's key holds the data's fingerprint."""
    est, model, pays = _payloads("gmm1d")
    path = str(tmp_path / "round.h5")
    j = FoldJournal(path, "fingerprint-of-the-old-data")
    assert j.begin_round(est, model) == {}
    j.record(0, pays[0])
    j.close()
    assert sorted(FoldJournal(path, "fingerprint-of-the-old-data").begin_round(est, model)) == [0]
    assert FoldJournal(path, "fingerprint-of-the-new-data").begin_round(est, model) == {}


def test_exact_value_codec_keeps_numpy_scalar_types():
    v = (
        np.float64(1.5),
        np.int64(3),
        np.float32(0.1),
        [np.array([1.0, np.inf]), {"a": np.float64(-0.0)}],
        float("nan"),
    )
    back = decode_value(encode_value(v))
    assert type(back[0]) is np.float64 and type(back[1]) is np.int64 and type(back[2]) is np.float32
    assert back[2] == np.float32(0.1) and np.array_equal(back[3][0], v[3][0])
    assert str(back[3][1]["a"]) == "-0.0" and np.isnan(back[4])
