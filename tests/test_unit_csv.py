"""The block CSV reader: same values as a plain parser, bounded memory, errors that name the
file and its line; arrays named by 0-based index with their dataset path."""

from __future__ import annotations

import tracemalloc

import h5py
import numpy as np
import pytest

from mixle_mpi.cli import datainput
from mixle_mpi.core.errors import DataError
from mixle_mpi.storage.store import ShardStore


def load(path, need="matrix", columns=None):
    return datainput.load(datainput.parse_source(str(path)), need, columns)


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 7 records, so that a short file crosses many block boundaries."""
    monkeypatch.setattr(datainput, "BLOCK_ROWS", 7)


def test_values_equal_a_plain_parse_across_blocks(tmp_path, small_blocks):
    rng = np.random.RandomState(0)
    x = rng.normal(size=(53, 3))
    path = tmp_path / "x.csv"
    lines = ["a,b,c"] + [",".join(repr(float(v)) for v in row) for row in x]
    lines.insert(10, "")  # blank lines are skipped
    lines.insert(30, " , ,")
    path.write_text("\n".join(lines))  # no final newline
    got = load(path)
    assert got.data.dtype == np.float64 and got.data.shape == (53, 3) and got.ncols == 3
    assert np.array_equal(got.data, x)  # repr round-trips exactly
    one = load(path, columns=["b"])
    assert one.data.shape == (53,) and one.ncols is None and np.array_equal(one.data, x[:, 1])
    assert one.data.flags.c_contiguous and one.data.base is None  # one array, trimmed in place


def test_integers_and_sequences(tmp_path, small_blocks):
    counts = tmp_path / "n.csv"
    counts.write_text("n\n" + "\n".join(str(i % 5) for i in range(40)) + "\n")
    got = load(counts, "integers")
    assert got.data.dtype == np.int64 and list(got.data) == [i % 5 for i in range(40)]
    seqs = tmp_path / "s.csv"
    seqs.write_text("1,2,3\n4\n\n5,6\n")
    assert load(seqs, "sequences").data == [[1.0, 2.0, 3.0], [4.0], [5.0, 6.0]]


@pytest.mark.parametrize(
    "body, need, message",
    [
        (
            "x,y\n1,2\n\n3,abc\n",
            "matrix",
            "line 4, column 2 (y): found 'abc', needs a finite number",
        ),
        ("x,y\n1,2\n3,\n", "matrix", "line 3, column 2 (y): found '', needs a finite number"),
        ("1,2\n3,nan\n", "matrix", "line 2, column 2: found 'nan', needs a finite number"),
        ("1,2\n-inf,2\n", "matrix", "line 2, column 1: found '-inf', needs a finite number"),
        ("x,y\n1,2\n\n3\n", "matrix", "line 4 has 1 columns, expected 2 like line 2"),
        (
            "n\n1\n-2\n",
            "integers",
            "line 3, column 1 (n): found '-2', needs a non-negative integer",
        ),
        (
            "n\n1\ninf\n",
            "integers",
            "line 3, column 1 (n): found 'inf', needs a non-negative integer",
        ),
        ("1,2\n3,x\n", "sequences", "line 2: found 'x', needs a finite number"),
        ("x,y,z\n", "matrix", "has a header row (x, y, z) but no data rows"),
        ("\n \n", "matrix", "is empty: found no header and no data rows"),
    ],
)
def test_errors_name_the_file_and_its_line(tmp_path, body, need, message):
    path = tmp_path / "bad.csv"
    path.write_text(body)
    with pytest.raises(DataError) as err:
        load(path, need)
    assert str(err.value).startswith(str(path)) and message in str(err.value)


def test_errors_in_later_blocks_name_the_right_line(tmp_path, small_blocks):
    path = tmp_path / "late.csv"
    path.write_text("x\n" + "1.0\n" * 30 + "oops\n" + "2.0\n" * 5)
    with pytest.raises(DataError, match="late.csv line 32, column 1 \\(x\\): found 'oops'"):
        load(path)


def test_table_errors_name_the_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("x,colour\n1.5,red\n\n-2,blue\nfoo,red\n")
    loaded = load(path, "table")
    assert loaded.lines == [2, 4, 5]
    with pytest.raises(
        DataError, match="t.csv line 5, column 1: found 'foo', needs a finite number"
    ):
        datainput.convert_table(loaded.data, ("gaussian", "categorical"), str(path), loaded.lines)


def test_reading_holds_about_one_float_array(tmp_path, monkeypatch):
    """Peak Python-heap use while reading is the result plus one block of records (the old
    reader kept every cell as a string: about 20 times the array)."""
    monkeypatch.setattr(datainput, "BLOCK_ROWS", 200)
    rows = 30_000
    path = tmp_path / "big.csv"
    rng = np.random.RandomState(1)
    np.savetxt(
        path, rng.normal(size=(rows, 4)), delimiter=",", header="a,b,c,d", comments="", fmt="%.6f"
    )
    tracemalloc.start()
    try:
        got = load(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got.data.shape == (rows, 4)
    assert peak < 2 * got.data.nbytes, (
        f"peak {peak / 1e6:.1f} MB for a {got.data.nbytes / 1e6:.1f} MB array"
    )


def test_big_csv_goes_through_a_temporary_hdf5_file(tmp_path, small_blocks, monkeypatch):
    """Above SPILL_BYTES the values are parsed into an unlinked HDF5 file that the shard store
    streams from, as from HDF5 input; the rows and the store are the same as in memory."""
    rng = np.random.RandomState(2)
    x = np.round(rng.normal(size=(200, 3)), 6)
    path = tmp_path / "x.csv"
    np.savetxt(path, x, delimiter=",", header="a,b,c", comments="", fmt="%.6f")
    in_memory = load(path)
    gaps = tmp_path / "gaps.csv"  # blank lines make the file longer than its rows
    lines = path.read_text().splitlines()
    gaps.write_text("\n".join(lines[:50] + [""] + lines[50:] + ["", ""]) + "\n")
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    monkeypatch.setattr(datainput, "SPILL_BYTES", 1000)
    spilled = datainput.load(datainput.parse_source(str(path)), "matrix", spill_dir=str(spill_dir))
    assert (
        isinstance(spilled.data, h5py.Dataset)
        and spilled.data.shape == (200, 3)
        and spilled.ncols == 3
    )
    assert list(spill_dir.iterdir()) == []  # unlinked at once: nothing is left if the driver dies
    assert np.array_equal(spilled.data[()], x) and np.array_equal(spilled.data[()], in_memory.data)
    with (
        ShardStore.create(tmp_path / "a.h5", in_memory.data, 3) as a,
        ShardStore.create(tmp_path / "b.h5", spilled.data, 3) as b,
    ):
        assert a.fingerprint() == b.fingerprint()
    spilled.close()
    assert not spilled.data.id.valid
    for columns, want in ((None, x), (["b"], x[:, 1])):
        trimmed = datainput.load(
            datainput.parse_source(str(gaps)), "matrix", columns, spill_dir=str(spill_dir)
        )
        assert trimmed.data.shape == want.shape and np.array_equal(trimmed.data[()], want)
        trimmed.close()


def test_a_bad_cell_in_a_spilled_csv_is_named_and_the_file_closed(
    tmp_path, small_blocks, monkeypatch
):
    path = tmp_path / "bad.csv"
    path.write_text("n\n" + "1\n" * 50 + "-1\n")
    monkeypatch.setattr(datainput, "SPILL_BYTES", 64)
    opened = []
    real = datainput._spill_file
    monkeypatch.setattr(datainput, "_spill_file", lambda d: opened.append(real(d)) or opened[-1])
    with pytest.raises(
        DataError,
        match="bad.csv line 52, column 1 \\(n\\): found '-1', needs a non-negative integer",
    ):
        load(path, "integers")
    assert len(opened) == 1 and not opened[0].id.valid


def test_spilling_keeps_the_array_out_of_memory(tmp_path, monkeypatch):
    """Parsing into the temporary file takes the same peak heap for 10,000 and 40,000 rows."""
    monkeypatch.setattr(datainput, "BLOCK_ROWS", 200)
    monkeypatch.setattr(datainput, "SPILL_BYTES", 1 << 16)

    def peak_for(rows: int) -> int:
        path = tmp_path / f"{rows}.csv"
        np.savetxt(path, np.random.RandomState(1).normal(size=(rows, 4)), delimiter=",", fmt="%.6f")
        tracemalloc.start()
        try:
            got = datainput.load(
                datainput.parse_source(str(path)), "matrix", spill_dir=str(tmp_path)
            )
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert got.data.shape == (rows, 4)
        got.close()
        return peak

    peak_for(2_000)  # first use: imports and caches
    small, large = peak_for(10_000), peak_for(40_000)
    assert large - small < 0.1 * 30_000 * 4 * 8, (
        f"peak grew from {small / 1e6:.2f} MB to {large / 1e6:.2f} MB"
    )


def test_array_errors_name_the_dataset_and_a_0_based_row(tmp_path):
    x = np.ones((20, 2))
    x[13, 0] = np.nan
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f["/g/X"] = x
    h5 = load(f"{tmp_path / 'd.h5'}:/g/X")
    with pytest.raises(
        DataError, match=r"d\.h5:/g/X: row 13 contains a NaN .*\(rows are counted from 0\)"
    ):
        ShardStore.create(tmp_path / "s1.h5", h5.data, 2)
    h5.close()
    np.save(tmp_path / "d.npy", x)
    npy = load(tmp_path / "d.npy")
    with pytest.raises(DataError, match=r"d\.npy: row 13 contains a NaN"):
        ShardStore.create(tmp_path / "s2.h5", npy.data, 2)
    with h5py.File(tmp_path / "q.h5", "w") as f:
        ds = f.create_dataset("seqs", (4,), dtype=h5py.vlen_dtype(np.float64))
        for i in range(4):
            ds[i] = [1.0, np.inf] if i == 2 else [1.0, 2.0]
    with pytest.raises(DataError, match=r"q\.h5:/seqs: row 2 contains a NaN or infinite value"):
        load(f"{tmp_path / 'q.h5'}:/seqs", "sequences")
