"""Driver-side shard store: the raw data shards live in one HDF5 file.

Rank 0 must be able to hand any shard to a replacement rank at any time, but
its RAM must not grow with the data, so the shards are written once (streamed
in blocks) and read back on demand. Shard i of S holds rows data[i::S] and
``read_shard(i)`` gives exactly ``[data[j] for j in range(i, n, S)]``, types
included, because results must be bit-identical after a recovery.

Row kinds: "ndarray" (numeric ndarray / h5py dataset, rows along axis 0),
"scalars" (a list of only ints or only floats), "arrays" (a list of numeric
ndarrays of one dtype and shape) are stored natively; anything else is
"general": one codec JSON string per row.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Callable

import h5py
import numpy as np

from mixle_mpi.core import liveness, probes
from mixle_mpi.core.atomicfile import commit, discard
from mixle_mpi.core.codec import decode_row, encode_row
from mixle_mpi.core.errors import ConfigError, DataError
from mixle_mpi.core.layout import default_num_shards
from mixle_mpi.core.privatefile import new_private_temp
from mixle_mpi.core.validate import check_int

__all__ = ["ShardStore", "FORMAT", "VERSION"]

FORMAT = "mixle_mpi.shards"
WRITE_BLOCK_BYTES = 64 << 20  # input rows read per block while the store is written, at most
LOAD_BLOCK_BYTES = (
    1 << 20
)  # rows per load message: the driver holds at most one such block per worker
VERSION = 1
ROW_KINDS = ("ndarray", "scalars", "arrays", "general")
_NUMERIC = "biufc"
_STR = h5py.string_dtype("utf-8")


def rows_from_packed(packed: tuple[str, object]) -> list:
    """Rebuild the rows of a shard from :meth:`ShardStore.read_packed` (on the worker)."""
    kind, obj = packed
    if kind == "general":
        return [decode_row(r) for r in obj]
    return obj.tolist() if kind == "scalars" else list(obj)


def opens_store(path: str, store_id: str) -> bool:
    """The store at ``path`` opens here and is the one with ``store_id`` (not another file at
    the same path, such as a node-local copy): a worker can read its own shards from it."""
    try:
        with ShardStore.open(path) as store:
            return store.store_id == store_id
    except Exception:  # noqa: BLE001 - unreadable, absent, another file: the driver streams
        return False


def _numeric(dtype: np.dtype) -> bool:
    return dtype.kind in _NUMERIC and dtype.fields is None


def _count(i: int, n: int, s: int) -> int:
    return len(range(i, n, s))


def _is_int(x) -> bool:
    return type(x) is int or isinstance(x, np.integer)


def _is_float(x) -> bool:
    return type(x) is float or isinstance(x, np.floating)


def _encode_block(rows, a: int, b: int) -> np.ndarray:
    out = np.empty(b - a, dtype=object)
    for k, row in enumerate(rows[a:b]):
        try:
            out[k] = encode_row(row)
        except ValueError as exc:
            raise DataError(f"row {a + k}: {exc}") from None
    return out


def _classify(data):
    """Return (row_kind, n, dtype, row_shape, block(a, b) -> ndarray) without reading the data."""
    if isinstance(data, h5py.Dataset):
        if data.ndim == 0 or not _numeric(data.dtype):
            raise DataError(
                f"an h5py dataset must be numeric with rows along axis 0; "
                f"found dtype {data.dtype} and shape {data.shape}"
            )
        return (
            "ndarray",
            data.shape[0],
            data.dtype,
            data.shape[1:],
            lambda a, b: np.asarray(data[a:b]),
        )
    if type(data) is np.ndarray:
        if data.ndim == 0:
            raise DataError("a 0-d ndarray has no rows; rows must lie along axis 0")
        if _numeric(data.dtype):
            return "ndarray", len(data), data.dtype, data.shape[1:], lambda a, b: data[a:b]
        return "general", len(data), _STR, (), lambda a, b: _encode_block(data, a, b)
    if type(data) not in (list, tuple):
        raise DataError(
            f"data must be a numpy ndarray, an h5py dataset or a list/tuple of rows; "
            f"found {type(data).__module__}.{type(data).__qualname__}"
        )
    rows, n = data, len(data)
    if n and all(type(r) is np.ndarray for r in rows):
        shape, dtype = rows[0].shape, rows[0].dtype
        for j, r in enumerate(rows):
            if r.shape != shape:
                raise DataError(
                    f"row {j} has shape {r.shape}, expected {shape} like row 0 "
                    "(ndarray rows must all have one shape)"
                )
        if shape and _numeric(dtype) and all(r.dtype == dtype for r in rows):
            return "arrays", n, dtype, shape, lambda a, b: np.stack(rows[a:b])
    elif n and all(_is_int(r) for r in rows):
        if all(-(2**63) <= int(r) < 2**63 for r in rows):
            return (
                "scalars",
                n,
                np.dtype(np.int64),
                (),
                lambda a, b: np.array(rows[a:b], dtype=np.int64),
            )
    elif n and all(_is_float(r) for r in rows):
        return (
            "scalars",
            n,
            np.dtype(np.float64),
            (),
            lambda a, b: np.array(rows[a:b], dtype=np.float64),
        )
    return "general", n, _STR, (), lambda a, b: _encode_block(rows, a, b)


def _first_nonfinite(block: np.ndarray) -> int | None:
    if block.dtype.kind not in "fc":
        return None
    ok = np.isfinite(block).reshape(len(block), -1).all(axis=1)
    return None if ok.all() else int(np.argmin(ok))


def source_name(data) -> str | None:
    """Where the rows come from, for error messages: ``file.h5:/dataset`` for an HDF5
    dataset, the file of a memory-mapped array (also behind an ``np.asarray`` view); None
    for data that lives only in memory."""
    if isinstance(data, h5py.Dataset):
        return f"{data.file.filename}:{data.name}"
    while isinstance(data, np.ndarray):
        if isinstance(data, np.memmap) and data.filename:
            return data.filename
        data = data.base
    return None


def nonfinite_row(source: str | None, row: int) -> DataError:
    """The error for a row with a NaN or infinity: arrays are named by 0-based index."""
    where = f"{source}: " if source else ""
    return DataError(
        f"{where}row {row} contains a NaN or infinite value; finite values are needed "
        "(rows are counted from 0)"
    )


def _write(
    f: h5py.File,
    n: int,
    s: int,
    dtype,
    row_shape: tuple,
    block: Callable,
    block_rows: int,
    source: str | None = None,
) -> None:
    """Stream blocks of rows; rows of shard i in block [a, b) are block[(i - a) % s :: s]."""
    group = f.create_group("shards")
    try:
        dsets = [
            group.create_dataset(str(i), shape=(_count(i, n, s),) + tuple(row_shape), dtype=dtype)
            for i in range(s)
        ]
    except TypeError as exc:
        raise DataError(f"dtype {dtype} cannot be stored in HDF5: {exc}") from None
    for a in range(0, n, block_rows):
        liveness.mark()  # a block written is progress, however slow the file system
        rows = _read_block(block, a, min(a + block_rows, n), source)
        bad = _first_nonfinite(rows)
        if bad is not None:
            raise nonfinite_row(source, a + bad)
        for i in range(s):
            start = (i - a) % s
            if start < len(rows):
                part = rows[start::s]
                offset = (a + start - i) // s
                dsets[i][offset : offset + len(part)] = part


def write_block_rows(kind: str, dtype, row_shape: tuple, cap: int) -> int:
    """Input rows per block while a store is written: ``cap``, fewer for wide rows, so that a
    block holds at most WRITE_BLOCK_BYTES at any width (65,536 rows of 10,000 float64
    columns were 5 GB) (pure)."""
    if kind == "general":
        return cap
    row_bytes = np.dtype(dtype).itemsize * int(np.prod(row_shape, dtype=np.int64))
    return max(1, min(cap, WRITE_BLOCK_BYTES // max(1, row_bytes)))


def _read_block(block: Callable, a: int, b: int, source: str | None):
    """Rows ``a:b`` of the input. A read error is the input's (a truncated or damaged HDF5
    file), not the shard store's: exit 2, naming the input."""
    try:
        return block(a, b)
    except OSError as exc:
        raise DataError(
            f"cannot read rows {a}..{b - 1} of the input {source or 'data'}: {exc}; the file is "
            "probably truncated or damaged"
        ) from None


class ShardStore:
    """Read-only view of a shard file; the h5py file stays open for the store's lifetime."""

    def __init__(self, path) -> None:
        self.path = os.fspath(path)
        try:
            self._file = h5py.File(self.path, "r")
        except OSError as exc:
            raise DataError(f"cannot open shard store {self.path!r}: {exc}") from None
        try:
            self._validate()
        except BaseException:
            self._file.close()
            raise

    def _validate(self) -> None:
        attrs, where = self._file.attrs, f"{self.path!r} is not a valid mixle_mpi shard store"
        fmt, version, kind = attrs.get("format"), attrs.get("version"), attrs.get("row_kind")
        if not isinstance(fmt, str) or fmt != FORMAT:
            raise DataError(f"{where}: found format={fmt!r}, needed {FORMAT!r}")
        if not isinstance(version, (int, np.integer)) or version != VERSION:
            raise DataError(f"{where}: found version={version!r}, needed {VERSION}")
        if not isinstance(kind, str) or kind not in ROW_KINDS:
            raise DataError(f"{where}: found row_kind={kind!r}, needed one of {ROW_KINDS}")
        s, n = attrs.get("num_shards"), attrs.get("num_rows")
        if not isinstance(s, np.integer) or not isinstance(n, np.integer) or not 1 <= s <= n:
            raise DataError(
                f"{where}: found num_shards={s!r} and num_rows={n!r}, needed 1 <= num_shards <= num_rows"
            )
        self._s, self._n, self._kind = int(s), int(n), kind
        group = self._file.get("shards")
        for i in range(self._s):
            ds = group.get(str(i)) if isinstance(group, h5py.Group) else None
            if (
                not isinstance(ds, h5py.Dataset)
                or ds.ndim < 1
                or ds.shape[0] != _count(i, self._n, self._s)
            ):
                raise DataError(
                    f"{where}: shard {i} is missing or does not hold "
                    f"{_count(i, self._n, self._s)} rows"
                )

    @classmethod
    def open(cls, path) -> "ShardStore":
        """Open an existing store read-only (validates the format attributes)."""
        return cls(path)

    @classmethod
    @probes.spanned("store_create")
    def create(cls, path, data, num_shards: int | None, block_rows: int = 65536) -> "ShardStore":
        """Write data round-robin into num_shards shards at path (atomically) and open it;
        ``num_shards=None`` takes :func:`~mixle_mpi.core.layout.default_num_shards` of the data."""
        s = None if num_shards is None else check_int("num_shards", num_shards)
        block_rows = check_int("block_rows", block_rows)
        kind, n, dtype, row_shape, block = _classify(data)
        block_rows = write_block_rows(kind, dtype, row_shape, block_rows)
        if s is None:
            s = max(1, default_num_shards(n))
        if n == 0:
            raise DataError(f"data is empty: need at least num_shards={s} observations")
        if n < s:
            raise DataError(f"found {n} observations but num_shards={s} needs at least {s}")
        path = os.fspath(path)
        if os.path.isdir(path):
            raise ConfigError(
                f"cannot write shard store at {path!r}: it is a directory, a file path is needed"
            )
        try:
            tmp = new_private_temp(
                path
            )  # a full copy of the user's data: owner-only, a name of its own
        except OSError as exc:
            raise ConfigError(
                f"cannot write shard store at {path!r}: {exc.strerror} (creating a file beside it)"
            ) from None
        try:
            with h5py.File(tmp, "w") as f:
                f.attrs.update(
                    {
                        "format": FORMAT,
                        "version": VERSION,
                        "num_shards": s,
                        "num_rows": n,
                        "row_kind": kind,
                        "store_id": uuid.uuid4().hex,
                    }
                )
                _write(f, n, s, dtype, row_shape, block, block_rows, source_name(data))
            commit(tmp, path)
        except BaseException as exc:
            discard(tmp)
            if isinstance(exc, OSError):
                raise ConfigError(f"cannot write shard store at {path!r}: {exc}") from exc
            raise
        return cls(path)

    @property
    def num_shards(self) -> int:
        return self._s

    @property
    def num_rows(self) -> int:
        return self._n

    @property
    def row_kind(self) -> str:
        return self._kind

    @property
    def store_id(self) -> str:
        """Random at creation: a worker that opens the same path on another host (a node-local
        folder) finds another id, and is sent its shards instead ("" in older stores)."""
        sid = self._file.attrs.get("store_id", "") if self._file is not None else ""
        return sid if isinstance(sid, str) else ""

    def read_rows(self, i: int) -> list:
        """Shard i's rows block by block, exactly as a worker rebuilds them from the driver's
        ``Load`` messages (the same blocks, the same row objects)."""
        rows: list = []
        for a, b in self.blocks(i):
            rows.extend(rows_from_packed(self.read_packed(i, a, b)))
        return rows

    def _dataset(self, i) -> h5py.Dataset:
        if self._file is None:
            raise ValueError(f"shard store {self.path!r} is closed")
        if (
            isinstance(i, (bool, np.bool_))
            or not isinstance(i, (int, np.integer))
            or not 0 <= i < self._s
        ):
            raise IndexError(f"shard index must be an integer in [0, {self._s}); found {i!r}")
        return self._file["shards"][str(int(i))]

    def shard_size(self, i: int) -> int:
        return self._dataset(i).shape[0]

    def shard_bytes(self, i: int) -> int:
        """Bytes shard i takes in the file (what loading it reads)."""
        return int(self._dataset(i).id.get_storage_size())

    def read_shard(self, i: int) -> list:
        """Rows of shard i, equal (values and types) to [data[j] for j in range(i, n, S)]."""
        return rows_from_packed(self.read_packed(i))

    def read_packed(self, i: int, start: int = 0, stop: int | None = None) -> tuple[str, object]:
        """Rows ``start:stop`` of shard i (default: all) as shipped to a worker: one ndarray
        (numeric kinds) or the row strings.

        Pickling one array is fast and unpickling it holds the GIL only briefly, unlike a
        list of a million row objects, so a worker's heartbeat thread keeps running.
        """
        ds = self._dataset(i)
        if self._kind == "general":
            return self._kind, list(ds.asstr()[start:stop])
        return self._kind, ds[start:stop]

    def blocks(self, i: int, max_bytes: int = LOAD_BLOCK_BYTES) -> list[tuple[int, int]]:
        """``(start, stop)`` row ranges covering shard i, each about ``max_bytes`` or one row:
        the driver streams a shard in these pieces, so its memory does not grow with N."""
        ds = self._dataset(i)
        n = ds.shape[0]
        if self._kind == "general":
            step = 8192
        else:
            step = max(
                1,
                max_bytes // max(1, ds.dtype.itemsize * int(np.prod(ds.shape[1:], dtype=np.int64))),
            )
        return [(a, min(a + step, n)) for a in range(0, n, step)] or [(0, 0)]

    def fingerprint(self) -> str:
        """sha256 hex over the header attributes and every shard's stored bytes, read in blocks."""
        h = hashlib.sha256(json.dumps([FORMAT, VERSION, self._s, self._n, self._kind]).encode())
        for i in range(self._s):
            liveness.mark()  # a shard read is progress, however slow the file system
            ds = self._dataset(i)
            h.update(
                json.dumps(
                    [i, list(ds.shape), "str" if self._kind == "general" else ds.dtype.str]
                ).encode()
            )
            row_bytes = max(1, ds.dtype.itemsize * int(np.prod(ds.shape[1:], dtype=np.int64)))
            step = 1024 if self._kind == "general" else max(1, (1 << 22) // row_bytes)
            for a in range(0, ds.shape[0], step):
                if self._kind == "general":
                    for r in ds.asstr()[a : a + step]:
                        b = r.encode("utf-8")
                        h.update(len(b).to_bytes(8, "little") + b)
                else:
                    h.update(np.ascontiguousarray(ds[a : a + step]).tobytes())
        return h.hexdigest()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "ShardStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"ShardStore({self.path!r}, num_shards={self._s}, num_rows={self._n}, "
            f"row_kind={self._kind!r})"
        )
