"""Data for ``mixle-mpi fit``: an HDF5 dataset (``file.h5:/group/X``), ``.npy``, CSV, or a
built-in data set (``builtin:iris``).

HDF5 numeric datasets are handed to the handle as ``h5py.Dataset`` objects, which the
driver copies into its shard store block by block, and ``.npy`` files are memory-mapped:
neither is loaded whole. CSV files, HDF5 sequence data (HMMs) and mixed-type tables are
read into memory on the driver once, then written to the store and dropped.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from importlib import resources

import numpy as np

from mixle_mpi.errors import ConfigError, DataError

H5_SUFFIXES = (".h5", ".hdf5", ".he5", ".nc")
BUILTIN = {"iris": "iris.csv"}
FORMS = "PATH.h5:/dataset, PATH.npy, PATH.csv or builtin:iris"


@dataclass(frozen=True)
class DataSource:
    kind: str           # "h5", "npy", "csv"
    path: str
    dataset: str | None = None
    text: str = ""


@dataclass
class Loaded:
    data: object        # what the handle takes: ndarray, h5py.Dataset or list of rows
    ncols: int | None   # columns of a matrix; None for 1-D rows
    describe: str
    closer: object = None

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
        name = text[len("builtin:"):]
        if name not in BUILTIN:
            raise ConfigError(f"unknown built-in data set {name!r}; valid ones are {sorted(BUILTIN)}")
        return DataSource("csv", str(resources.files("mixle_mpi").joinpath("data", BUILTIN[name])), None, text)
    lower = text.lower()
    for suffix in H5_SUFFIXES:
        pos = lower.find(suffix + ":")
        if pos >= 0:
            cut = pos + len(suffix)
            return DataSource("h5", text[:cut], text[cut + 1:] or None, text)
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
        raise ConfigError(f"--columns {text!r} selects no column; give names or indices like 0,1 or 0:4")
    return out


def load(source: DataSource, need: str, columns: list[str] | None = None) -> Loaded:
    """Open ``source`` for a model that needs ``need`` rows (see modelspec.row_shape_needed)."""
    if not os.path.exists(source.path):
        raise ConfigError(f"no such data file {source.path!r} (from --data {source.text!r}); needs one of {FORMS}")
    if columns and source.kind != "csv":
        raise ConfigError(f"--columns selects CSV columns only; {source.path!r} is {source.kind}")
    if source.kind == "h5":
        return _load_h5(source, need)
    if source.kind == "npy":
        return _load_npy(source, need)
    return _load_csv(source, need, columns)


# -- HDF5 ---------------------------------------------------------------------------
def list_datasets(f) -> list[str]:
    import h5py

    found: list[str] = []
    f.visititems(lambda name, obj: found.append(f"/{name} {obj.shape} {obj.dtype}") if isinstance(obj, h5py.Dataset) else None)
    return found


def _load_h5(source: DataSource, need: str) -> Loaded:
    import h5py

    try:
        f = h5py.File(source.path, "r")
    except OSError as exc:
        raise DataError(f"{source.path!r} is not a readable HDF5 file: {exc}") from None
    try:
        names = list_datasets(f)
        if source.dataset is None:
            if len(names) != 1:
                raise ConfigError(f"{source.path} holds {len(names)} datasets; name one as {source.path}:/NAME. "
                                  f"Its datasets are: {', '.join(names) or 'none'}")
            ds = f[names[0].split(" ")[0]]
        else:
            ds = f.get(source.dataset)
            if not isinstance(ds, h5py.Dataset):
                what = "a group, not a dataset" if ds is not None else "not there"
                raise ConfigError(f"dataset {source.dataset!r} in {source.path} is {what}; "
                                  f"its datasets are: {', '.join(names) or 'none'}")
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
        if vlen is None:
            raise DataError(f"{where} has dtype {ds.dtype}; an HMM needs one sequence per row, stored as a "
                            "variable-length dataset (h5py.vlen_dtype(float))")
        rows = [np.asarray(r).tolist() for r in ds[()]]
        return Loaded(rows, None, f"{where}: {len(rows)} sequences")
    if need == "table":
        raise DataError(f"{where}: a composite model reads mixed-type rows from CSV only")
    if vlen is not None or ds.dtype.kind not in "biuf" or ds.ndim not in (1, 2):
        raise DataError(f"{where} has dtype {ds.dtype} and shape {ds.shape}; needs a numeric dataset "
                        "with one row per observation (1-D, or 2-D with one column per variable)")
    _check_need(need, ds.dtype, ds.ndim, where)
    return Loaded(ds, ds.shape[1] if ds.ndim == 2 else None, f"{where}: shape {ds.shape}, {ds.dtype}")


# -- .npy ---------------------------------------------------------------------------
def _load_npy(source: DataSource, need: str) -> Loaded:
    try:
        arr = np.load(source.path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataError(f"{source.path!r} is not a numeric .npy file: {exc}") from None
    if need in ("sequences", "table") or arr.dtype.kind not in "biuf" or arr.ndim not in (1, 2):
        raise DataError(f"{source.path} has dtype {arr.dtype} and shape {arr.shape}; .npy input must be a numeric "
                        "1-D or 2-D array (sequences and mixed tables: use HDF5 or CSV)")
    _check_need(need, arr.dtype, arr.ndim, source.path)
    return Loaded(np.asarray(arr), arr.shape[1] if arr.ndim == 2 else None, f"{source.path}: shape {arr.shape}, {arr.dtype}")


def _check_need(need: str, dtype, ndim: int, where: str) -> None:
    if need == "integers" and (dtype.kind not in "biu" or ndim != 1):
        raise DataError(f"{where} has dtype {dtype} with {ndim} dimension(s); a Poisson mixture needs "
                        "one column of non-negative integers")


# -- CSV ----------------------------------------------------------------------------
def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _read_csv(path: str) -> tuple[list[str] | None, list[list[str]]]:
    delimiter = "\t" if path.lower().endswith(".tsv") else ","
    with open(path, encoding="utf-8", newline="") as fh:
        rows = [[c.strip() for c in r] for r in csv.reader(fh, delimiter=delimiter) if r and any(c.strip() for c in r)]
    if not rows:
        raise DataError(f"{path} has no rows")
    header = None
    if not all(_is_number(c) for c in rows[0]) and len(rows) > 1 and any(_is_number(c) for c in rows[1]):
        header, rows = rows[0], rows[1:]
    return header, rows


def _select(header, rows, columns, path):
    if columns is None:
        return header, rows
    index = []
    for c in columns:
        if c.isdigit() and (header is None or c not in header):
            i = int(c)
        elif header is not None and c in header:
            i = header.index(c)
        else:
            raise ConfigError(f"{path} has no column {c!r}; its columns are "
                              f"{header if header else list(range(len(rows[0])))}")
        if i >= len(rows[0]):
            raise ConfigError(f"{path} has {len(rows[0])} columns; column index {i} is out of range")
        index.append(i)
    return ([header[i] for i in index] if header else None), [[r[i] for i in index] for r in rows]


def _convert(cell: str, kind: str, where: str):
    try:
        if kind == "categorical":
            return cell
        value = float(cell)
        if kind == "poisson":
            if value < 0 or value != int(value):
                raise ValueError
            return int(value)
        if not np.isfinite(value):
            raise ValueError
        return value
    except ValueError:
        need = {"poisson": "a non-negative integer", "gaussian": "a finite number"}[kind]
        raise DataError(f"{where}: found {cell!r}, needs {need}") from None


def _load_csv(source: DataSource, need: str, columns) -> Loaded:
    path = source.path
    header, rows = _read_csv(path)
    if need == "sequences":
        kind = "gaussian"
        seqs = [[_convert(c, kind, f"{path} row {i + 1}") for c in r if c != ""] for i, r in enumerate(rows)]
        return Loaded(seqs, None, f"{path}: {len(seqs)} sequences")
    header, rows = _select(header, rows, columns, path)
    width = len(rows[0])
    for i, r in enumerate(rows):
        if len(r) != width:
            raise DataError(f"{path} row {i + 1} has {len(r)} columns, expected {width} like the first row")
    if need == "table":
        return Loaded([tuple(r) for r in rows], width, f"{path}: {len(rows)} rows x {width} columns")
    kind = "poisson" if need == "integers" else "gaussian"
    if need == "integers" and width != 1:
        raise DataError(f"{path} has {width} columns; a Poisson mixture needs one (select it with --columns)")
    values = [[_convert(c, kind, f"{path} row {i + 1} column {j + 1}") for j, c in enumerate(r)] for i, r in enumerate(rows)]
    arr = np.asarray(values, dtype=np.int64 if kind == "poisson" else np.float64)
    if width == 1:
        arr = arr[:, 0]
    return Loaded(arr, None if width == 1 else width, f"{path}: {len(arr)} rows x {width} columns"
                  + (f" ({', '.join(header)})" if header else ""))


def convert_table(rows: list[tuple], parts: tuple[str, ...], where: str) -> list[tuple]:
    """Type a CSV table's cells by the composite model's parts (one part per column)."""
    if rows and len(rows[0]) != len(parts):
        raise DataError(f"{where} has {len(rows[0])} columns but the model has {len(parts)} parts "
                        f"({'+'.join(parts)}); select columns with --columns or change parts=")
    return [tuple(_convert(c, k, f"{where} row {i + 1} column {j + 1}") for j, (c, k) in enumerate(zip(r, parts)))
            for i, r in enumerate(rows)]
