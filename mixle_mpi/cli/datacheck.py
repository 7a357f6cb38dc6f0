"""Every value of the data, checked before a launch (``fit --dry-run``), in bounded memory.

The fit checks values as the driver writes its shard store: after the queue wait and the
MPI start, so a NaN in row 10,000,000 used to end a job that a dry run had passed. Here
every row of every format is read once, block by block: a CSV's blocks are parsed by
numpy's ``loadtxt`` (about ten times the csv module's speed), and a block that it cannot
parse or whose values are bad is read again cell by cell, to name the line and column as
the load would. Arrays (.npy, HDF5) are read a block at a time. A quoted CSV cell that
spans lines is read cell by cell too.
"""

from __future__ import annotations

import csv
import itertools

import numpy as np

from mixle_mpi.cli import datainput

BLOCK_BYTES = 16 << 20  # text or array bytes held at once, whatever the width
BLOCK_LINES = 1 << 16  # CSV lines parsed at once, at most


def check_values(source, need: str, columns=None, parts: tuple[str, ...] = ()) -> int:
    """Read every value of ``source`` as a model that needs ``need`` rows takes it (``parts``:
    a composite model's, one per column); raise the error the load would raise, with its
    row or line. Returns the rows checked."""
    if source.kind == "csv":
        return _check_csv(source.path, need, columns, parts)
    if source.kind == "npy":
        return _check_array(np.load(source.path, mmap_mode="r"), need, source.path)
    f, ds = datainput.open_h5(source)
    with f:
        where = f"{source.path}:{ds.name}"
        if need == "sequences":
            return _check_sequences(ds, where)
        return _check_array(ds, need, where)


def _rows_per_block(row_bytes: int) -> int:
    return max(1, BLOCK_BYTES // max(1, row_bytes))


def _check_array(values, need: str, where: str) -> int:
    """A numeric array's rows: finite floats; non-negative counts for a Poisson mixture."""
    from mixle_mpi.storage.store import nonfinite_row

    if need == "integers":
        datainput.check_counts(values, where)
        return values.shape[0]
    if values.dtype.kind not in "fc":
        return values.shape[0]  # integers are always finite
    row_bytes = values.dtype.itemsize * int(np.prod(values.shape[1:], dtype=np.int64))
    step = _rows_per_block(row_bytes)
    for a in range(0, values.shape[0], step):
        block = np.asarray(values[a : a + step])
        ok = np.isfinite(block).reshape(len(block), -1).all(axis=1)
        if not ok.all():
            raise nonfinite_row(where, a + int(np.flatnonzero(~ok)[0]))
    return values.shape[0]


def _check_sequences(ds, where: str) -> int:
    """An HMM's sequences, a block of rows at a time (each named by its 0-based row)."""
    step = datainput.SAMPLE_ROWS
    for a in range(0, ds.shape[0], step):
        datainput.finite_sequences(ds[a : a + step], where, first_row=a)
    return ds.shape[0]


def _text_blocks(fh):
    """Lists of lines, each list within BLOCK_LINES lines and about BLOCK_BYTES characters."""
    while True:
        block, size = [], 0
        for line in itertools.islice(fh, BLOCK_LINES):
            block.append(line)
            size += len(line)
            if size >= BLOCK_BYTES:
                break
        if not block:
            return
        yield block


def _clean_rows(lines: list[str], delimiter: str, width: int, index, kind: str) -> int | None:
    """The rows of the block when numpy reads it as ``width`` numbers a line, all good for
    ``kind``; None when it cannot (then the block is read cell by cell)."""
    try:
        table = np.loadtxt(
            lines, delimiter=delimiter, dtype=np.float64, ndmin=2, quotechar='"', comments=None
        )
    except ValueError:
        return None
    if table.shape[1] != width:
        return None
    values = table[:, index]
    good = np.isfinite(values).all()
    if good and kind == "poisson":
        good = (values >= 0).all() and (values == np.floor(values)).all()
    return len(table) if good else None


def _records_of(lines: list[str], first_line: int, delimiter: str):
    """(file line number, stripped cells) of each non-blank record of ``lines``."""
    reader = csv.reader(lines, delimiter=delimiter)
    for cells in reader:
        cells = [c.strip() for c in cells]
        if any(cells):
            yield first_line + reader.line_num - 1, cells


def _check_csv(path: str, need: str, columns, parts: tuple[str, ...]) -> int:
    head, _ = datainput.open_csv(path)
    index = datainput.column_index(head, columns, path)
    delimiter = datainput.delimiter_of(path)
    kind = "poisson" if need == "integers" else "gaussian"
    rows, line = 0, head.first_line
    with open(path, encoding="utf-8", newline="") as fh:
        for _ in range(head.first_line - 1):
            next(fh)
        for lines in _text_blocks(fh):
            fast = None
            if need in ("matrix", "integers"):
                fast = _clean_rows(lines, delimiter, len(head.first), index, kind)
            if fast is not None:
                rows += fast
            else:
                rows += _check_records(
                    list(_records_of(lines, line, delimiter)), head, index, need, parts, path
                )
            line += len(lines)
    return rows


def _check_records(records, head, index, need: str, parts, path: str) -> int:
    """One block, cell by cell, as the load reads it: its error names the line and column."""
    if need == "sequences":
        for line, cells in records:
            for cell in cells:
                if cell != "":
                    datainput.convert_cell(cell, "gaussian", f"{path} line {line}")
        return len(records)
    for block in datainput.record_blocks(iter(records), head, path):
        if need == "table":
            rows = [tuple(cells[i] for i in index) for _, cells in block]
            datainput.convert_table(rows, parts, path, [n for n, _ in block])
        else:
            datainput.block_values(
                block, index, head, "poisson" if need == "integers" else "gaussian", path
            )
    return len(records)
