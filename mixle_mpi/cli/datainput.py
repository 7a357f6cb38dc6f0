"""Data for ``mixle-mpi fit``: an HDF5 dataset (``file.h5:/group/X``), ``.npy``, CSV, or a
built-in data set (``builtin:iris``).

HDF5 numeric datasets are handed to the handle as ``h5py.Dataset`` objects, which the
driver copies into its shard store block by block, and ``.npy`` files are memory-mapped:
neither is loaded whole. CSV files, HDF5 sequence data (HMMs) and mixed-type tables are
read into memory on the driver once, then written to the store and dropped.
"""

from __future__ import annotations

import csv
import itertools
import os
import tempfile
from dataclasses import dataclass
from importlib import resources

import numpy as np

from mixle_mpi.core.errors import ConfigError, DataError

H5_SUFFIXES = (".h5", ".hdf5", ".he5", ".nc")
BUILTIN = {"iris": "iris.csv"}
FORMS = "PATH.h5:/dataset, PATH.npy, PATH.csv or builtin:iris"


@dataclass(frozen=True)
class DataSource:
    kind: str  # "h5", "npy", "csv"
    path: str
    dataset: str | None = None
    text: str = ""


@dataclass
class Loaded:
    data: object  # what the handle takes: ndarray, h5py.Dataset or list of rows
    ncols: int | None  # columns of a matrix; None for 1-D rows
    describe: str
    closer: object = None
    lines: list[int] | None = None  # CSV tables: each row's file line number, for error messages

    def close(self) -> None:
        if self.closer is not None:
            self.closer.close()
            self.closer = None


def parse_source(text: str) -> DataSource:
    """Split a data argument into kind, path and dataset (pure)."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"no data given; needs one of {FORMS}")
    text = text.strip()
    if text.startswith("builtin:"):
        name = text[len("builtin:") :]
        if name not in BUILTIN:
            raise ConfigError(
                f"unknown built-in data set {name!r}; valid ones are {sorted(BUILTIN)}"
            )
        return DataSource(
            "csv", str(resources.files("mixle_mpi").joinpath("data", BUILTIN[name])), None, text
        )
    lower = text.lower()
    for suffix in H5_SUFFIXES:
        pos = lower.find(suffix + ":")
        if pos >= 0:
            cut = pos + len(suffix)
            return DataSource("h5", text[:cut], text[cut + 1 :] or None, text)
        if lower.endswith(suffix):
            return DataSource("h5", text, None, text)
    if lower.endswith(".npy"):
        return DataSource("npy", text, None, text)
    if lower.endswith((".csv", ".txt", ".tsv")):
        return DataSource("csv", text, None, text)
    raise ConfigError(f"cannot tell the format of {text!r}; needs one of {FORMS}")


def parse_columns(text: str | None) -> list[str] | None:
    """``"a,b"`` or ``"0,2"`` or ``"0:4"`` -> column selectors (pure)."""
    if text is None or str(text).strip() == "":
        return None
    out: list[str] = []
    for item in str(text).split(","):
        item = item.strip()
        a, colon, b = item.partition(":")
        if colon and a.strip().isdigit() and b.strip().isdigit():
            out.extend(str(i) for i in range(int(a), int(b)))
        elif item:
            out.append(item)
    if not out:
        raise ConfigError(
            f"--columns {text!r} selects no column; give names or indices like 0,1 or 0:4"
        )
    return out


def _close_names(path: str) -> list[str]:
    """Files beside ``path`` whose names are close to its name: what a typo meant."""
    import difflib

    folder = os.path.dirname(path) or "."
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [
        os.path.join(os.path.dirname(path), n)
        for n in difflib.get_close_matches(os.path.basename(path), names, 3, 0.6)
    ]


def _check_source(source: DataSource, columns: list[str] | None) -> None:
    if not os.path.exists(source.path):
        close = _close_names(source.path)
        hint = (
            f"; did you mean {' or '.join(repr(c) for c in close)}?"
            if close
            else f"; needs one of {FORMS}"
        )
        raise ConfigError(f"no such data file {source.path!r} (from --data {source.text!r}){hint}")
    if columns and source.kind != "csv":
        raise ConfigError(f"--columns selects CSV columns only; {source.path!r} is {source.kind}")


def load(
    source: DataSource, need: str, columns: list[str] | None = None, spill_dir: str | None = None
) -> Loaded:
    """Open ``source`` for a model that needs ``need`` rows (see modelspec.row_shape_needed).

    A big numeric CSV is parsed into a temporary HDF5 file in ``spill_dir`` (default: the
    system's temporary folder), which ``Loaded.close`` deletes."""
    _check_source(source, columns)
    if source.kind == "h5":
        return _load_h5(source, need)
    if source.kind == "npy":
        return _load_npy(source, need)
    return _load_csv(source, need, columns, spill_dir)


# -- shape only, for a dry run ----------------------------------------------------------
PY_VALUE_BYTES = 32  # a float in a Python list: the object (24 bytes) and its pointer (8)
SAMPLE_ROWS = 1000  # sequences sampled for their mean length


@dataclass(frozen=True)
class DataShape:
    """The size of the data, read from headers only (``mixle-mpi fit --dry-run``)."""

    rows: int  # observations (CSV: data lines, blank ones included)
    values: float  # numbers per observation (sequences: the mean length of a sample)
    value_bytes: (
        int  # bytes per value on a rank: the dtype's in an array, PY_VALUE_BYTES in Python rows
    )
    driver_reads_all: bool  # the driver holds the whole data while it writes the shard store
    describe: str
    ncols: int | None  # as Loaded.ncols, to build the estimator


def probe(source: DataSource, need: str, columns: list[str] | None = None) -> DataShape:
    """The data's size, checked as ``load`` checks it but without reading the values: HDF5
    and .npy headers, a CSV's first records and its line count."""
    _check_source(source, columns)
    if source.kind == "csv":
        return _probe_csv(source, need, columns)
    if source.kind == "h5" and need == "sequences":
        return _probe_h5_sequences(source)
    loaded = _load_h5(source, need) if source.kind == "h5" else _load_npy(source, need)
    try:
        arr = loaded.data
        values = int(np.prod(arr.shape[1:], dtype=np.int64))
        return DataShape(
            arr.shape[0], values, arr.dtype.itemsize, False, loaded.describe, loaded.ncols
        )
    finally:
        loaded.close()


def _probe_h5_sequences(source: DataSource) -> DataShape:
    f, ds = open_h5(source)
    with f:
        where = f"{source.path}:{ds.name}"
        require_vlen(ds, where)
        sample = ds[:SAMPLE_ROWS]
        mean = float(np.mean([len(r) for r in sample])) if len(sample) else 0.0
        return DataShape(
            ds.shape[0],
            mean,
            PY_VALUE_BYTES,
            True,
            f"{where}: {ds.shape[0]} sequences, mean length {mean:.1f} (first {len(sample)})",
            None,
        )


def _probe_csv(source: DataSource, need: str, columns) -> DataShape:
    path = source.path
    head, _ = open_csv(path)
    index = column_index(head, columns, path)
    rows = _count_lines(path) - head.first_line + 1
    if need == "sequences":
        values = float(sum(1 for c in head.first if c != ""))
        return DataShape(
            rows, values, PY_VALUE_BYTES, True, f"{path}: {rows} data lines (sequences)", None
        )
    if need == "integers" and len(index) != 1:
        raise DataError(
            f"{path} has {len(index)} columns; a Poisson mixture needs one (select it with --columns)"
        )
    value_bytes = PY_VALUE_BYTES if need == "table" else 8
    in_memory = need == "table" or rows * len(index) * value_bytes <= SPILL_BYTES
    names = f" ({', '.join(head.header[i] for i in index)})" if head.header else ""
    return DataShape(
        rows,
        len(index),
        value_bytes,
        in_memory,
        f"{path}: {rows} data lines x {len(index)} columns{names}",
        None if len(index) == 1 and need != "table" else len(index),
    )


# -- HDF5 ---------------------------------------------------------------------------
def list_datasets(f) -> list[str]:
    import h5py

    found: list[str] = []
    f.visititems(
        lambda name, obj: (
            found.append(f"/{name} {obj.shape} {obj.dtype}")
            if isinstance(obj, h5py.Dataset)
            else None
        )
    )
    return found


def open_h5(source: DataSource):
    """(open h5py.File, the dataset it names); the file is closed again on any error."""
    import h5py

    try:
        f = h5py.File(source.path, "r")
    except OSError as exc:
        raise DataError(f"{source.path!r} is not a readable HDF5 file: {exc}") from None
    try:
        names = list_datasets(f)
        if source.dataset is None:
            if len(names) != 1:
                raise ConfigError(
                    f"{source.path} holds {len(names)} datasets; name one as {source.path}:/NAME. "
                    f"Its datasets are: {', '.join(names) or 'none'}"
                )
            ds = f[names[0].split(" ")[0]]
        else:
            ds = f.get(source.dataset)
            if not isinstance(ds, h5py.Dataset):
                what = "a group, not a dataset" if ds is not None else "not there"
                raise ConfigError(
                    f"dataset {source.dataset!r} in {source.path} is {what}; "
                    f"its datasets are: {', '.join(names) or 'none'}"
                )
    except BaseException:
        f.close()
        raise
    return f, ds


def _load_h5(source: DataSource, need: str) -> Loaded:
    f, ds = open_h5(source)
    try:
        loaded = _from_h5_dataset(ds, need, f"{source.path}:{ds.name}")
    except BaseException:
        f.close()
        raise
    loaded.closer = f
    return loaded


def _from_h5_dataset(ds, need: str, where: str) -> Loaded:
    import h5py

    vlen = h5py.check_vlen_dtype(ds.dtype)
    if need == "sequences":
        require_vlen(ds, where)
        rows = finite_sequences(ds[()], where)
        return Loaded(rows, None, f"{where}: {len(rows)} sequences")
    if need == "table":
        raise DataError(f"{where}: a composite model reads mixed-type rows from CSV only")
    if vlen is not None or ds.dtype.kind not in "biuf" or ds.ndim not in (1, 2):
        raise DataError(
            f"{where} has dtype {ds.dtype} and shape {ds.shape}; needs a numeric dataset "
            "with one row per observation (1-D, or 2-D with one column per variable)"
        )
    _check_need(need, ds.dtype, ds.ndim, where)
    if need == "integers":
        check_counts(ds, where)
    return Loaded(
        ds, ds.shape[1] if ds.ndim == 2 else None, f"{where}: shape {ds.shape}, {ds.dtype}"
    )


def require_vlen(ds, where: str) -> None:
    import h5py

    if h5py.check_vlen_dtype(ds.dtype) is None:
        raise DataError(
            f"{where} has dtype {ds.dtype}; an HMM needs one sequence per row, stored as a "
            "variable-length dataset (h5py.vlen_dtype(float))"
        )


def finite_sequences(seqs, where: str, first_row: int = 0) -> list[list]:
    """Sequences as lists, after checking every value is finite (named by 0-based row;
    ``seqs`` starts at row ``first_row``)."""
    from mixle_mpi.storage.store import nonfinite_row

    rows = []
    for i, seq in enumerate(seqs):
        seq = np.asarray(seq)
        if seq.dtype.kind in "fc" and not np.isfinite(seq).all():
            raise nonfinite_row(where, first_row + i)
        rows.append(seq.tolist())
    return rows


# -- .npy ---------------------------------------------------------------------------
def _load_npy(source: DataSource, need: str) -> Loaded:
    try:
        arr = np.load(source.path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataError(f"{source.path!r} is not a numeric .npy file: {exc}") from None
    if need in ("sequences", "table") or arr.dtype.kind not in "biuf" or arr.ndim not in (1, 2):
        raise DataError(
            f"{source.path} has dtype {arr.dtype} and shape {arr.shape}; .npy input must be a numeric "
            "1-D or 2-D array (sequences and mixed tables: use HDF5 or CSV)"
        )
    _check_need(need, arr.dtype, arr.ndim, source.path)
    if need == "integers":
        check_counts(arr, source.path)
    return Loaded(
        np.asarray(arr),
        arr.shape[1] if arr.ndim == 2 else None,
        f"{source.path}: shape {arr.shape}, {arr.dtype}",
    )


def check_counts(values, where: str) -> None:
    """A Poisson mixture's counts are never negative: the first negative one is named (its
    0-based row), read block by block so that a large file is never loaded whole."""
    if values.dtype.kind == "u":
        return
    step = 1 << 20
    for a in range(0, values.shape[0], step):
        block = np.asarray(values[a : a + step])
        bad = np.flatnonzero(block < 0)
        if bad.size:
            row = a + int(bad[0])
            raise DataError(
                f"{where}: row {row} is {block[bad[0]]}; a Poisson mixture needs non-negative integer "
                "counts"
            )


def _check_need(need: str, dtype, ndim: int, where: str) -> None:
    if need == "integers" and (dtype.kind not in "biu" or ndim != 1):
        raise DataError(
            f"{where} has dtype {dtype} with {ndim} dimension(s); a Poisson mixture needs "
            "one column of non-negative integers"
        )


# -- CSV ----------------------------------------------------------------------------
# A numeric CSV is parsed in blocks of BLOCK_ROWS records straight into one float array,
# so the driver never holds the file as Python strings (a 1M-row file took 665 MB that
# way); above SPILL_BYTES the array is a dataset in a temporary HDF5 file, so the driver's
# memory does not grow with the data at all. Errors name the file and its 1-based line
# number, as an editor shows it.
BLOCK_ROWS = 4096
BLOCK_CELLS = (
    1 << 18
)  # cells per parsed block, at most: a byte budget at any width (10,000 columns: 26 rows)


def block_rows(width: int) -> int:
    """Records per parsed block for ``width`` cells a record: BLOCK_ROWS, fewer when wide (pure)."""
    return max(1, min(BLOCK_ROWS, BLOCK_CELLS // max(1, width)))


SPILL_BYTES = (
    8 << 20
)  # a numeric CSV bigger than this as numbers is parsed to a temporary HDF5 file


@dataclass(frozen=True)
class CsvHead:
    """What the first records of a CSV say: its header (if any) and its first data record."""

    header: list[str] | None
    first: list[str]  # the first data record's cells
    first_line: int  # its file line number


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def delimiter_of(path: str) -> str:
    """A tab for .tsv files, else a comma (pure)."""
    return "\t" if path.lower().endswith(".tsv") else ","


def _records(path: str):
    """(file line number, stripped cells) of each non-blank record, streamed."""
    delimiter = delimiter_of(path)
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        for cells in reader:
            cells = [c.strip() for c in cells]
            if any(cells):
                yield reader.line_num, cells


def open_csv(path: str):
    """(CsvHead, iterator over the data records, the first one included).

    A first record that is not all numbers is a header when the second record has a
    number in it; a lone non-numeric record is a header with no data under it.
    """
    records = _records(path)
    first = next(records, None)
    if first is None:
        raise DataError(f"{path} is empty: found no header and no data rows")
    second = next(records, None)
    if second is None and not all(_is_number(c) for c in first[1]):
        raise DataError(f"{path} has a header row ({', '.join(first[1])}) but no data rows")
    if (
        second is not None
        and not all(_is_number(c) for c in first[1])
        and any(_is_number(c) for c in second[1])
    ):
        return CsvHead(first[1], second[1], second[0]), itertools.chain([second], records)
    head = [first] if second is None else [first, second]
    return CsvHead(None, first[1], first[0]), itertools.chain(head, records)


def column_index(head: CsvHead, columns: list[str] | None, path: str) -> list[int]:
    """The 0-based indices of the selected columns (all when ``columns`` is None)."""
    width = len(head.first)
    if columns is None:
        return list(range(width))
    header = head.header
    index = []
    for c in columns:
        if c.isdigit() and (header is None or c not in header):
            i = int(c)
        elif header is not None and c in header:
            i = header.index(c)
        else:
            raise ConfigError(
                f"{path} has no column {c!r}; its columns are {header if header else list(range(width))}"
            )
        if i >= width:
            raise ConfigError(f"{path} has {width} columns; column index {i} is out of range")
        index.append(i)
    return index


def _column_name(head: CsvHead, i: int) -> str:
    """'column 3' or 'column 3 (petal_length_cm)': 1-based, as a spreadsheet counts."""
    name = f" ({head.header[i]})" if head.header and i < len(head.header) else ""
    return f"column {i + 1}{name}"


def _check_width(cells: list[str], line: int, head: CsvHead, path: str) -> None:
    if len(cells) != len(head.first):
        raise DataError(
            f"{path} line {line} has {len(cells)} columns, expected {len(head.first)} "
            f"like line {head.first_line}"
        )


def convert_cell(cell: str, kind: str, where: str):
    try:
        if kind == "categorical":
            return cell
        value = float(cell)
        if kind == "poisson":
            if not value >= 0 or value != int(value):
                raise ValueError
            return int(value)
        if not np.isfinite(value):
            raise ValueError
        return value
    except (ValueError, OverflowError):
        raise DataError(f"{where}: found {cell!r}, needs {NEEDS[kind]}") from None


NEEDS = {"poisson": "a non-negative integer", "gaussian": "a finite number"}


def _count_lines(path: str) -> int:
    """Lines in the file, counted in binary blocks: an upper bound on its records."""
    count, last = 0, b"\n"
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 16), b""):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def _bad_cell(cells: list[list[str]], values: np.ndarray | None, kind: str) -> tuple[int, int]:
    """(record, column) of the first cell that is not a value of ``kind``, in reading order."""
    for r, row in enumerate(cells):
        for j, cell in enumerate(row):
            try:
                v = float(cell) if values is None else values[r, j]
            except ValueError:
                return r, j
            if not np.isfinite(v) or (kind == "poisson" and (v < 0 or v != np.floor(v))):
                return r, j
    raise AssertionError("no bad cell in a block that failed to convert")


def block_values(block, index: list[int], head: CsvHead, kind: str, path: str) -> np.ndarray:
    """One block of records -> a float array of the selected columns; errors name the cell."""
    cells = [[cells[i] for i in index] for _, cells in block]
    try:
        values = np.array(cells, dtype=np.float64).reshape(len(cells), len(index))
    except ValueError:
        values = None
    ok = values is not None and np.isfinite(values).all()
    if ok and kind == "poisson":
        ok = bool((values >= 0).all() and (values == np.floor(values)).all())
    if not ok:
        r, j = _bad_cell(cells, values, kind)
        raise DataError(
            f"{path} line {block[r][0]}, {_column_name(head, index[j])}: found {cells[r][j]!r}, "
            f"needs {NEEDS[kind]}{_text_advice(head, block, cells[r][j])}"
        )
    return values


def _text_advice(head: CsvHead, block, cell: str) -> str:
    """For a cell of text (not a bad number): the --columns that keeps the numeric columns."""
    if _is_number(cell) or cell == "":
        return ""
    numeric = [i for i in range(len(head.first)) if all(_is_number(cells[i]) for _, cells in block)]
    if not numeric:
        return "; no column of these rows holds numbers only"
    if numeric == list(range(numeric[0], numeric[-1] + 1)):
        pick = f"{numeric[0]}:{numeric[-1] + 1}" if len(numeric) > 1 else str(numeric[0])
    else:
        pick = ",".join(str(i) for i in numeric)
    return f"; that column holds text: keep the numeric columns with --columns {pick}"


FIRST_ROWS = 100


def check_first_rows(source: DataSource, need: str, columns: list[str] | None = None) -> None:
    """The first rows of a CSV convert as the model needs them (a check before launch; the
    load checks every row)."""
    if source.kind != "csv" or need not in ("matrix", "integers"):
        return
    head, records = open_csv(source.path)
    index = column_index(head, columns, source.path)
    block = list(itertools.islice(records, FIRST_ROWS))
    for line, cells in block:
        _check_width(cells, line, head, source.path)
    block_values(block, index, head, "poisson" if need == "integers" else "gaussian", source.path)


def record_blocks(records, head: CsvHead, path: str):
    """Lists of at most ``block_rows`` (line, cells) records, each checked for its width."""
    block, size = [], None
    for line, cells in records:
        _check_width(cells, line, head, path)
        block.append((line, cells))
        size = size or block_rows(len(cells))
        if len(block) == size:
            yield block
            block = []
    if block:
        yield block


def _spill_file(directory: str | None):
    """An HDF5 file that lives only while it is open: made in ``directory`` (default: the
    system's temporary folder) and unlinked at once, so that nothing is left behind even
    when the driver is killed."""
    import h5py

    fd, path = tempfile.mkstemp(prefix="mixle_mpi_csv_", suffix=".h5", dir=directory)
    os.close(fd)
    try:
        return h5py.File(path, "w")
    finally:
        os.unlink(path)


def _numeric_sink(shape: tuple, dtype: np.dtype, spill_dir: str | None):
    """(where the values go, the file to close or None): an array in memory, or, above
    SPILL_BYTES, a contiguous dataset in a temporary HDF5 file that the handle then streams
    into its shard store block by block, as it does HDF5 input. (A chunked, resizable
    dataset would cost the driver about 10 MB of HDF5 chunk buffers per million rows.)"""
    if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize <= SPILL_BYTES:
        return np.empty(shape, dtype=dtype), None
    f = _spill_file(spill_dir)
    return f.create_dataset("parsed", shape=shape, dtype=dtype), f


def _trim(out, n: int, spill):
    """The first ``n`` rows of the sink, when blank lines made it longer than the data."""
    if n == out.shape[0]:
        return out
    if spill is None:
        out.resize((n,) + out.shape[1:], refcheck=False)  # shrinks in place: no second copy
        return out
    rows = spill.create_dataset("rows", shape=(n,) + out.shape[1:], dtype=out.dtype)
    step = block_rows(int(np.prod(out.shape[1:], dtype=np.int64)))
    for a in range(0, n, step):
        rows[a : a + step] = out[a : min(a + step, n)]
    return rows


def _read_numeric(
    path: str, head: CsvHead, records, index: list[int], kind: str, spill_dir: str | None = None
):
    """Parse block by block into one sink (rows x selected columns; 1-D for one column);
    returns (the data, the spill file to close or None)."""
    width = len(index)
    lines = _count_lines(path) - head.first_line + 1  # the rows, unless blank lines are among them
    shape = (lines,) if width == 1 else (lines, width)
    out, spill = _numeric_sink(
        shape, np.dtype(np.int64 if kind == "poisson" else np.float64), spill_dir
    )
    try:
        n = 0
        for block in record_blocks(records, head, path):
            values = block_values(block, index, head, kind, path)
            out[n : n + len(block)] = values[:, 0] if width == 1 else values
            n += len(block)
        return _trim(out, n, spill), spill
    except BaseException:
        if spill is not None:
            spill.close()
        raise


def _load_csv(source: DataSource, need: str, columns, spill_dir: str | None = None) -> Loaded:
    path = source.path
    head, records = open_csv(path)
    if need == "sequences":
        seqs = [
            [convert_cell(c, "gaussian", f"{path} line {line}") for c in cells if c != ""]
            for line, cells in records
        ]
        return Loaded(seqs, None, f"{path}: {len(seqs)} sequences")
    index = column_index(head, columns, path)
    header = [head.header[i] for i in index] if head.header else None
    width = len(index)
    if need == "table":
        rows, lines = [], []
        for block in record_blocks(records, head, path):
            rows.extend(tuple(cells[i] for i in index) for _, cells in block)
            lines.extend(line for line, _ in block)
        return Loaded(rows, width, f"{path}: {len(rows)} rows x {width} columns", lines=lines)
    if need == "integers" and width != 1:
        raise DataError(
            f"{path} has {width} columns; a Poisson mixture needs one (select it with --columns)"
        )
    arr, spill = _read_numeric(
        path, head, records, index, "poisson" if need == "integers" else "gaussian", spill_dir
    )
    return Loaded(
        arr,
        None if width == 1 else width,
        f"{path}: {len(arr)} rows x {width} columns"
        + (f" ({', '.join(header)})" if header else ""),
        closer=spill,
    )


def convert_table(
    rows: list[tuple], parts: tuple[str, ...], where: str, lines: list[int] | None = None
) -> list[tuple]:
    """Type a CSV table's cells by the composite model's parts (one part per column).

    ``lines`` are the rows' file line numbers (``Loaded.lines``), so that an error points
    at the line an editor shows; without them rows are counted from 1.
    """
    if rows and len(rows[0]) != len(parts):
        raise DataError(
            f"{where} has {len(rows[0])} columns but the model has {len(parts)} parts "
            f"({'+'.join(parts)}); select columns with --columns or change parts="
        )
    label, numbers = ("line", lines) if lines is not None else ("row", range(1, len(rows) + 1))
    return [
        tuple(
            convert_cell(c, k, f"{where} {label} {n}, column {j + 1}")
            for j, (c, k) in enumerate(zip(r, parts, strict=False))
        )
        for n, r in zip(numbers, rows, strict=False)
    ]
