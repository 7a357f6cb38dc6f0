"""Mid-fold persistence: a round's already-received shard payloads survive a driver restart.

With it, a driver killed in the middle of an E-step round recomputes, after resuming, only
the shards whose payloads had not arrived. Payloads are stored with the type-exact safe
codec (never pickled) and each carries a sha256; an entry that fails it, or a file that a
kill left unreadable, is simply recomputed. A round is identified by the data's fingerprint,
the estimator and the model it folds against, so a stale journal can never be used for
another round, nor for the same round over data that changed since.
"""

from __future__ import annotations

import os
import pickle

import h5py

from mixle_mpi.core.codec import decode_value, encode_value
from mixle_mpi.core.estep import PROTO
from mixle_mpi.core.privatefile import create_private
from mixle_mpi.core.validate import sha256_text


def round_key(estimator, model, data: str) -> str:
    """The round's identity: the data's fingerprint (``ShardStore.fingerprint``), the
    estimator and the model."""
    from mixle.utils.serialization import to_json

    return sha256_text(data + "\n" + to_json(estimator) + "\n" + to_json(model))


class FoldJournal:
    def __init__(self, path: str, data: str) -> None:
        self.path = path
        self.data = data  # the fingerprint of the data this journal's rounds fold over
        self._file = None

    def begin_round(self, estimator, model) -> dict[int, bytes]:
        """``begin`` the round of ``estimator`` and ``model`` over this journal's data."""
        return self.begin(round_key(estimator, model, self.data))

    def begin(self, key: str) -> dict[int, bytes]:
        """Start (or pick up) the round ``key``; returns the payloads already received."""
        self.close()
        found: dict[int, bytes] = {}
        if os.path.exists(self.path):
            try:
                with h5py.File(self.path, "r") as f:
                    if f.attrs.get("key") == key:
                        for name, ds in f.items():
                            text = bytes(ds[()]).decode("utf-8")
                            if sha256_text(text) == ds.attrs.get("sha256"):
                                found[int(name)] = pickle.dumps(decode_value(text), protocol=PROTO)
            except (OSError, KeyError, ValueError):
                found = {}
        if found:
            self._file = h5py.File(self.path, "a")
        else:
            create_private(self.path)
            self._file = h5py.File(self.path, "w")
            self._file.attrs["key"] = key
            self._file.flush()
        return found

    def record(self, shard: int, payload: bytes) -> None:
        import numpy as np

        text = encode_value(pickle.loads(payload))  # nosec B301 - a payload this job's worker sent
        name = str(shard)
        if name in self._file:
            del self._file[name]
        ds = self._file.create_dataset(
            name, data=np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
        )
        ds.attrs["sha256"] = sha256_text(text)
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
