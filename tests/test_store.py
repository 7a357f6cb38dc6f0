"""ShardStore: shards read back exactly as [data[j] for j in range(i, n, S)], validated, atomic."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import h5py
import numpy as np
import pytest

from mixle_mpi.core.errors import DataError
from mixle_mpi.storage.store import ShardStore


def assert_same(a, b):
    """Equal values AND equal types all the way down (ndarrays: dtype, shape, bytes)."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, np.ndarray) and a.dtype.kind == "O":
        assert a.shape == b.shape
        assert_same(list(a.reshape(-1)), list(b.reshape(-1)))
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=False):
            assert_same(x, y)
    elif isinstance(a, dict):
        assert_same(list(a.items()), list(b.items()))
    elif isinstance(a, (float, np.floating, np.complexfloating)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    else:
        assert a == b


def expected(data, i, s):
    return [data[j] for j in range(i, len(data), s)]


def check_all(store, data, kind):
    s = store.num_shards
    assert store.row_kind == kind and store.num_rows == len(data)
    for i in range(s):
        rows = store.read_shard(i)
        assert store.shard_size(i) == len(rows) == len(range(i, len(data), s))
        assert_same(rows, expected(data, i, s))


def make(tmp_path, data, s, **kw):
    return ShardStore.create(tmp_path / "shards.h5", data, s, **kw)


ARRAYS = {
    "f8-1d": np.random.default_rng(1).standard_normal(23),
    "f4-2d": np.random.default_rng(2).standard_normal((23, 3)).astype(np.float32),
    "i8-3d": np.arange(23 * 6).reshape(23, 2, 3),
    "big-endian": np.linspace(-1, 1, 23).astype(">f8"),
    "bool": np.arange(23) % 3 == 0,
    "u2": np.arange(23, dtype=np.uint16),
    "complex": np.arange(23) * (1 - 0.5j),
    "tiny-floats": np.array([5e-324, -0.0, 1e308] * 8)[:23],
    "empty-rows": np.zeros((23, 0)),
}


@pytest.mark.parametrize("name", sorted(ARRAYS))
@pytest.mark.parametrize("s, block_rows", [(1, 65536), (3, 7), (4, 5), (7, 1), (23, 2), (5, 10)])
def test_ndarray_round_trip(tmp_path, name, s, block_rows):
    data = ARRAYS[name]
    with make(tmp_path, data, s, block_rows=block_rows) as store:
        check_all(store, data, "ndarray")


def test_h5py_dataset_read_blockwise_never_whole(tmp_path):
    data = np.random.default_rng(3).standard_normal((50, 3))
    reads = []

    class Spy(h5py.Dataset):
        def __getitem__(self, key):
            reads.append(key)
            return super().__getitem__(key)

    with h5py.File(tmp_path / "src.h5", "w") as f:
        f["x"] = data
    with h5py.File(tmp_path / "src.h5", "r") as f:
        with make(tmp_path, Spy(f["x"].id), 4, block_rows=7) as store:
            check_all(store, data, "ndarray")
    assert len(reads) == 8
    assert all(isinstance(k, slice) and k.stop - k.start <= 7 for k in reads)


def test_scalar_lists(tmp_path):
    floats = [float(x) for x in np.random.default_rng(4).standard_normal(17)] + [-0.0, 5e-324]
    with make(tmp_path, floats, 3, block_rows=4) as store:
        check_all(store, floats, "scalars")
    ints = list(range(-5, 12)) + [2**63 - 1, -(2**63)]
    with make(tmp_path, ints, 4, block_rows=3) as store:
        check_all(store, ints, "scalars")


def test_numpy_scalars_in_list_read_back_as_python_scalars(tmp_path):
    with make(tmp_path, [np.float32(0.1), 2.5, np.float64(3)], 2) as store:
        assert_same(store.read_shard(0), [float(np.float32(0.1)), 3.0])
    with make(tmp_path, [np.int8(-3), 7, np.uint64(9)], 2) as store:
        assert store.row_kind == "scalars"
        assert_same(store.read_shard(0), [-3, 9])


@pytest.mark.parametrize(
    "data",
    [
        [1, 2.5, 3, 4.0],  # mixed int/float would change types in float64: general keeps them
        [True, False, True],  # bools are not scalars
        [2**63, 1, 2],  # does not fit int64
    ],
    ids=["mixed", "bool", "bigint"],
)
def test_lists_that_need_general_keep_types(tmp_path, data):
    with make(tmp_path, data, 2) as store:
        check_all(store, data, "general")


def test_list_of_arrays(tmp_path):
    rng = np.random.default_rng(5)
    data = [rng.standard_normal((2, 3)) for _ in range(19)]
    with make(tmp_path, data, 4, block_rows=6) as store:
        check_all(store, data, "arrays")


@pytest.mark.parametrize(
    "data",
    [
        [np.array([1.0, 2.0]), np.array([1, 2])],  # dtypes differ
        [np.array(1.5), np.array(2.5)],  # 0-d rows
        [np.array(["a", "b"]), np.array(["c", "d"])],  # str dtype
    ],
    ids=["mixed-dtype", "0-d", "str"],
)
def test_array_lists_that_need_general(tmp_path, data):
    with make(tmp_path, data, 2) as store:
        check_all(store, data, "general")


GENERAL = {
    "tuples": [(1.5, "a", 3), (2.5, "b", 4), (-0.0, "", 5), (1e-300, "\u00e9", 6), (0.1, "x", 7)],
    "array-tuples": [(np.arange(i, dtype=np.float32) / 3, [1, 2]) for i in range(9)],
    "hmm": [
        [float(x) for x in np.random.default_rng(i).standard_normal(i % 5 + 1)] for i in range(13)
    ],
    "dicts": [{"w": i, 1: [i * 0.5], "nested": {"t": (i, None)}} for i in range(6)],
    "mixed": [None, "s", 3, 2.5, [1], (2,), {"k": np.arange(2)}, np.array([[1, 2]], dtype=np.int8)],
}


@pytest.mark.parametrize("name", sorted(GENERAL))
@pytest.mark.parametrize("s, block_rows", [(1, 65536), (2, 3), (5, 1)])
def test_general_rows(tmp_path, name, s, block_rows):
    data = GENERAL[name]
    with make(tmp_path, data, s, block_rows=block_rows) as store:
        check_all(store, data, "general")


def test_tuple_input_and_object_ndarray_input(tmp_path):
    data = tuple(GENERAL["tuples"])
    with make(tmp_path, data, 2) as store:
        check_all(store, data, "general")
    objs = np.empty(5, dtype=object)
    objs[:] = [(1, 2.5), [3], "x", None, np.arange(2)]
    with make(tmp_path, objs, 2, block_rows=2) as store:
        check_all(store, objs, "general")


def assert_fails(tmp_path, data, s, match, **kw):
    path = tmp_path / "shards.h5"
    with pytest.raises(ValueError, match=match):
        ShardStore.create(path, data, s, **kw)
    assert not path.exists() and not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_empty_and_too_few_rows(tmp_path):
    for empty in ([], (), np.zeros((0, 3))):
        assert_fails(tmp_path, empty, 2, r"data is empty: need at least num_shards=2 observations")
    assert_fails(
        tmp_path, [1.0, 2.0, 3.0], 4, r"found 3 observations but num_shards=4 needs at least 4"
    )


@pytest.mark.parametrize("s", [0, -1, True, 1.5, "2"])
def test_bad_num_shards(tmp_path, s):
    assert_fails(tmp_path, [1.0, 2.0], s, "num_shards must be an integer >= 1")


def test_bad_block_rows(tmp_path):
    assert_fails(tmp_path, [1.0, 2.0], 1, "block_rows must be an integer >= 1", block_rows=0)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_numeric_rows_named(tmp_path, bad):
    arr = np.ones((30, 2))
    arr[17, 1] = bad
    msg = "row 17 contains a NaN or infinite value"
    assert_fails(tmp_path, arr, 3, msg, block_rows=5)
    assert_fails(tmp_path, [float(x) for x in arr[:, 1]], 3, msg, block_rows=4)
    assert_fails(tmp_path, list(arr), 3, msg, block_rows=6)
    with h5py.File(tmp_path / "src.h5", "w") as f:
        f["x"] = arr
        dset = f["x"]
        assert_fails(tmp_path, dset, 3, msg, block_rows=7)


def test_nonfinite_general_row_named(tmp_path):
    data = [(1.0, "a")] * 5 + [(float("nan"), "b")]
    assert_fails(tmp_path, data, 2, r"row 5: .*NaN or infinite")


def test_unsupported_row_type_named(tmp_path):
    assert_fails(tmp_path, [(1, "a"), (2, {3})], 2, r"row 1: .*type builtins\.set")


def test_ragged_ndarray_rows(tmp_path):
    data = [np.zeros(4)] * 17 + [np.zeros(3)] + [np.zeros(4)] * 2
    assert_fails(tmp_path, data, 2, r"row 17 has shape \(3,\), expected \(4,\) like row 0")


@pytest.mark.parametrize(
    "data, match",
    [
        ({"a": 1}, "found builtins.dict"),
        (iter([1.0, 2.0]), "found builtins.list_iterator"),
        (np.array(3.0), "0-d ndarray"),
        (np.ma.array([1.0, 2.0]), "MaskedArray"),
    ],
)
def test_bad_data_container(tmp_path, data, match):
    assert_fails(tmp_path, data, 1, match)


def test_non_numeric_h5py_dataset_rejected(tmp_path):
    with h5py.File(tmp_path / "src.h5", "w") as f:
        f["s"] = np.array([b"a", b"b"])
        assert_fails(tmp_path, f["s"], 1, "h5py dataset must be numeric")


def test_unwritable_paths(tmp_path):
    missing = tmp_path / "no" / "such" / "dir" / "s.h5"
    with pytest.raises(ValueError, match=r"no/such/dir/s\.h5.*No such file or directory"):
        ShardStore.create(missing, [1.0], 1)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match=r"afile/s\.h5.*Not a directory"):
        ShardStore.create(tmp_path / "afile" / "s.h5", [1.0], 1)
    (tmp_path / "adir").mkdir()
    with pytest.raises(ValueError, match=r"adir.*is a directory"):
        ShardStore.create(tmp_path / "adir", [1.0], 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_read_only_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    with pytest.raises(ValueError, match=r"ro/s\.h5.*Permission denied"):
        ShardStore.create(ro / "s.h5", [1.0], 1)


def test_failed_create_keeps_existing_store(tmp_path):
    path = tmp_path / "shards.h5"
    with ShardStore.create(path, [1.0, 2.0, 3.0], 2) as store:
        before = store.fingerprint()
    with pytest.raises(ValueError, match="NaN or infinite"):
        ShardStore.create(path, [1.0, float("nan"), 3.0], 2)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]  # its temp file is gone
    with ShardStore.open(path) as store:
        assert store.fingerprint() == before and store.read_shard(0) == [1.0, 3.0]


def test_open_rejects_non_stores(tmp_path):
    with pytest.raises(ValueError, match=r"cannot open shard store .*missing\.h5"):
        ShardStore.open(tmp_path / "missing.h5")
    (tmp_path / "text.h5").write_text("not hdf5")
    with pytest.raises(ValueError, match=r"cannot open shard store .*text\.h5"):
        ShardStore.open(tmp_path / "text.h5")
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(ValueError, match=r"not a valid mixle_mpi shard store: found format=None"):
        ShardStore.open(tmp_path / "other.h5")
    with ShardStore.create(tmp_path / "s.h5", [1.0, 2.0], 2):
        pass
    with h5py.File(tmp_path / "s.h5", "a") as f:
        f.attrs["version"] = 2
    with pytest.raises(ValueError, match="found version=.*2.*needed 1"):
        ShardStore.open(tmp_path / "s.h5")
    with h5py.File(tmp_path / "s.h5", "a") as f:
        f.attrs["version"] = 1
        del f["shards/1"]
    with pytest.raises(ValueError, match="shard 1 is missing"):
        ShardStore.open(tmp_path / "s.h5")


def test_open_reads_read_only_and_keeps_file_open(tmp_path):
    data = np.arange(10.0)
    ShardStore.create(tmp_path / "s.h5", data, 3).close()
    store = ShardStore.open(tmp_path / "s.h5")
    assert store._file.mode == "r"
    for _ in range(3):
        check_all(store, data, "ndarray")
    with pytest.raises(IndexError, match=r"\[0, 3\)"):
        store.read_shard(3)
    with pytest.raises(IndexError):
        store.shard_size(-1)
    store.close()
    store.close()
    with pytest.raises(ValueError, match="closed"):
        store.read_shard(0)


def test_fingerprint(tmp_path):
    data = np.random.default_rng(6).standard_normal((40, 2))
    with ShardStore.create(tmp_path / "a.h5", data, 3, block_rows=7) as a:
        fa = a.fingerprint()
        assert len(fa) == 64 and fa == a.fingerprint()
    with ShardStore.open(tmp_path / "a.h5") as a:
        assert a.fingerprint() == fa
    with ShardStore.create(tmp_path / "b.h5", data, 3, block_rows=65536) as b:
        assert b.fingerprint() == fa
    changed = data.copy()
    changed[39, 0] = np.nextafter(changed[39, 0], 1.0)
    with ShardStore.create(tmp_path / "c.h5", changed, 3) as c:
        assert c.fingerprint() != fa
    with ShardStore.create(tmp_path / "d.h5", data, 4) as d:
        assert d.fingerprint() != fa
    rows = GENERAL["dicts"]
    with ShardStore.create(tmp_path / "g.h5", rows, 2) as g:
        fg = g.fingerprint()
    with ShardStore.open(tmp_path / "g.h5") as g:
        assert g.fingerprint() == fg
    with ShardStore.create(tmp_path / "h.h5", rows[:-1] + [{"w": 0}], 2) as h:
        assert h.fingerprint() != fg


def test_packed_shards_rebuild_the_same_rows(tmp_path):
    import pickle

    from mixle_mpi.storage.store import rows_from_packed

    cases = [
        np.arange(40.0).reshape(20, 2),
        [1.5, 2.5, 3.5, 4.5],
        [(1.0, "a"), (2.0, "b"), (3.0, "c")],
    ]
    for k, data in enumerate(cases):
        with ShardStore.create(str(tmp_path / f"s{k}.h5"), data, 2) as st:
            for i in range(2):
                packed = pickle.loads(pickle.dumps(st.read_packed(i)))
                got, want = rows_from_packed(packed), st.read_shard(i)
                assert len(got) == len(want)
                for a, b in zip(got, want, strict=False):
                    assert type(a) is type(b)
                    assert np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b


@pytest.mark.parametrize(
    "kind,data",
    [
        ("ndarray", np.arange(3000.0).reshape(1000, 3)),
        ("scalars", [float(x) for x in range(1001)]),
        ("general", [("a", i, {"k": [i]}) for i in range(999)]),
    ],
)
def test_blocks_rebuild_each_shard_exactly(tmp_path, kind, data):
    """The driver streams a shard in blocks; the worker's concatenated rows equal the shard."""
    from mixle_mpi.storage.store import rows_from_packed

    with ShardStore.create(tmp_path / "s.h5", data, 3) as st:
        for i in range(3):
            blocks = st.blocks(i, max_bytes=64)
            assert blocks[0][0] == 0 and blocks[-1][1] == st.shard_size(i)
            assert all(
                a < b and b == c
                for (a, b), (c, _) in zip(
                    blocks, blocks[1:] + [(blocks[-1][1], None)], strict=False
                )
            )
            rows = [r for a, b in blocks for r in rows_from_packed(st.read_packed(i, a, b))]
            assert_same(rows, expected(data, i, 3))


PAGE_FAULTS = """
import resource, sys
import numpy as np
from mixle_mpi.core.malloc import retain_freed_memory
if sys.argv[1] == "retain":
    assert retain_freed_memory() is True
for _ in range(3):  # warm up, as a worker's first E-step does
    a = np.ones(1 << 20); b = a * 2.0; del a, b
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):  # an E-step's temporaries: two 8 MiB arrays, allocated and freed each call
    a = np.ones(1 << 20); b = a * 2.0; del a, b
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


def _page_faults(mode: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", PAGE_FAULTS, mode], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt tuning is glibc-only")
def test_retain_freed_memory_reuses_heap_pages():
    """What the worker calls it for: glibc accepts both thresholds (True), and repeated E-step
    temporaries then reuse freed heap pages instead of faulting in fresh zeroed ones
    (thousands of minor faults per call without it)."""
    without, retained = int(_page_faults("default")), int(_page_faults("retain"))
    assert without > 2000, (
        f"the baseline shows no page faults to save ({without}); the test cannot tell"
    )
    assert retained < 200 and retained * 10 < without, (retained, without)


@pytest.mark.parametrize(
    "data",
    [np.arange(40000, dtype=float).reshape(-1, 2), [("a", i, float(i)) for i in range(30000)]],
    ids=["ndarray", "general"],
)
def test_a_worker_reads_the_rows_the_driver_would_stream(tmp_path, data, monkeypatch):
    """``read_rows`` (a worker reading its own shard) gives the rows ``Load`` blocks rebuild,
    block by block, with small blocks so a shard spans several."""
    from mixle_mpi.storage import store as store_mod
    from mixle_mpi.storage.store import rows_from_packed

    monkeypatch.setattr(store_mod, "LOAD_BLOCK_BYTES", 4096)
    with ShardStore.create(tmp_path / "s.h5", data, 3) as st:
        for i in range(3):
            streamed = []
            for a, b in st.blocks(i, 4096):
                streamed.extend(rows_from_packed(st.read_packed(i, a, b)))
            own = st.read_rows(i)
            assert len(st.blocks(i, 4096)) > 1
            assert len(own) == len(streamed) == len(st.read_shard(i))
            for x, y in zip(own, streamed, strict=False):
                assert type(x) is type(y) and repr(x) == repr(y)


def test_each_store_has_its_own_id_and_a_worker_tells_another_file_at_the_same_path(tmp_path):
    from mixle_mpi.storage.store import opens_store

    path = tmp_path / "s.h5"
    with ShardStore.create(path, np.arange(10.0), 2) as first:
        first_id = first.store_id
    assert len(first_id) == 32 and opens_store(str(path), first_id)
    with ShardStore.create(
        path, np.arange(10.0), 2
    ) as second:  # the same data again: another store
        assert second.store_id != first_id
    assert not opens_store(str(path), first_id)  # a node-local copy, say: streamed instead
    assert not opens_store(str(tmp_path / "absent.h5"), first_id)
    (tmp_path / "junk.h5").write_bytes(b"not hdf5")
    assert not opens_store(str(tmp_path / "junk.h5"), first_id)


def test_blocks_have_a_byte_budget_at_any_width(tmp_path):
    """Issue 33: the writer read 65,536 rows a block whatever their width (10,000 float64
    columns: 5 GB a block). Blocks now hold at most WRITE_BLOCK_BYTES, and the store is the same."""
    from mixle_mpi.cli.datainput import BLOCK_CELLS, block_rows
    from mixle_mpi.storage.store import WRITE_BLOCK_BYTES, write_block_rows

    assert (
        write_block_rows("ndarray", np.float64, (10_000,), 65536)
        == WRITE_BLOCK_BYTES // 80_000
        == 838
    )
    assert write_block_rows("scalars", np.float64, (), 65536) == 65536
    assert write_block_rows("general", object, (), 8192) == 8192
    assert (
        block_rows(10_000) == BLOCK_CELLS // 10_000
        and block_rows(1) == 4096
        and block_rows(10**9) == 1
    )
    wide = np.arange(3 * 10_000, dtype=np.float64).reshape(3, 10_000)
    with ShardStore.create(tmp_path / "wide.h5", wide, 2, block_rows=1) as store:
        assert np.array_equal(np.asarray(store.read_shard(0)), wide[0::2])


def test_a_damaged_hdf5_input_is_named_as_the_input_not_the_store(tmp_path):
    """Issue 33: reading a damaged input said "cannot write shard store"."""
    import h5py

    src = tmp_path / "in.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset(
            "x", data=np.arange(400_000, dtype=np.float64), chunks=(10_000,), compression="gzip"
        )
    size = os.path.getsize(src)
    with open(
        src, "r+b"
    ) as fh:  # damaged in the middle (a bad copy): its chunks no longer decompress
        fh.seek(size // 2)
        fh.write(b"\xff" * (size // 4))
    with h5py.File(src, "r") as f:
        with pytest.raises(
            DataError, match=r"cannot read rows .* of the input .*truncated or damaged"
        ):
            ShardStore.create(tmp_path / "s.h5", f["x"], 2)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
