"""``fit --dry-run`` reads every value of every input format, reports every problem at once,
checks the out-dir and prints a launch command a shell takes as it is (issue 48)."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from mixle_mpi.cli import datacheck, datainput
from mixle_mpi.cli.commands import main
from mixle_mpi.core.errors import DataError

NAN_ROW = 10_000_000  # the data row (counted from 1) that holds the NaN


def _csv_with_nan_at(path, rows: int, nan_row: int) -> None:
    """A 3-column CSV of ``rows`` data rows, the ``nan_row``-th a NaN: written as repeated
    blocks of bytes (about a second for 1e7 rows, where np.savetxt takes a minute)."""
    line = b"0.5,1.25,-3\n"
    block = line * 1_000_000
    with open(path, "wb") as fh:
        fh.write(b"x,y,z\n")
        done = 0
        while done < rows:
            n = min(1_000_000, rows - done)
            chunk = block[: n * len(line)]
            if done < nan_row <= done + n:
                at = (nan_row - done - 1) * len(line)
                chunk = chunk[:at] + b"0.5,nan,-3\n" + chunk[at + len(line) :]
            fh.write(chunk)
            done += n


def _dry_run(*args: str) -> list[str]:
    return ["fit", "-n", "3", "--dry-run", "--model", "gmm:k=2", *args]


def test_a_nan_in_the_ten_millionth_csv_row_is_found_and_named(tmp_path, capsys):
    path = tmp_path / "big.csv"
    _csv_with_nan_at(path, NAN_ROW + 5, NAN_ROW)
    start = time.monotonic()
    code = main(_dry_run("--data", str(path), "--out-dir", str(tmp_path / "out")))
    took = time.monotonic() - start
    err = capsys.readouterr().err
    assert code == 2, err
    # the header is line 1: data row 10,000,000 is line 10,000,001
    assert f"big.csv line {NAN_ROW + 1}, column 2 (y): found 'nan', needs a finite number" in err
    print(f"dry run over {NAN_ROW + 5} rows: {took:.1f} s")


def test_three_bad_options_are_named_in_one_run(capsys):
    code = main(
        _dry_run(
            "--data",
            "builtin:iris",
            "--columns",
            "0:4",
            "--max-its",
            "0",
            "--init-p",
            "2",
            "--resume",
            "maybe",
        )  # fmt: skip
    )
    err = capsys.readouterr().err
    assert code == 2
    for needle in (
        "--max-its must be an integer >= 1; found 0",
        "--init-p must be in (0, 1]; found 2.0",
        "--resume must be one of ['auto', 'yes', 'no']; found 'maybe'",
    ):
        assert needle in err, err


def test_a_job_files_keys_are_named_as_written_there(tmp_path):
    from mixle_mpi.cli.jobconfig import resolve_all

    _, problems = resolve_all({"max_its": 0, "max_itz": 3}, {"init_p": "2"}, "job.toml")
    assert "max_its must be an integer >= 1; found 0 (in job.toml)" in problems
    assert "--init-p must be in (0, 1]; found 2.0" in problems
    assert "unknown option 'max_itz' in the job.toml; did you mean 'max_its'?" in problems


@pytest.mark.parametrize(
    "need, values, row",
    [
        ("matrix", np.r_[np.zeros((5, 2)), [[0.0, np.inf]], np.zeros((3, 2))], 5),
        ("matrix", np.r_[np.zeros(7), [np.nan]], 7),
    ],
)
def test_arrays_are_read_to_the_last_row(tmp_path, need, values, row):
    np.save(tmp_path / "a.npy", values)
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f["X"] = values
    for text in (f"{tmp_path}/a.npy", f"{tmp_path}/a.h5:/X"):
        with pytest.raises(DataError, match=f"row {row} contains a NaN or infinite value"):
            datacheck.check_values(datainput.parse_source(text), need)


def test_counts_are_read_to_the_last_row(tmp_path, monkeypatch):
    monkeypatch.setattr(datacheck, "BLOCK_LINES", 4)  # several blocks, the bad one the last
    counts = np.r_[np.arange(10), [-2]]
    np.save(tmp_path / "c.npy", counts)
    with pytest.raises(DataError, match="row 10 is -2"):
        datacheck.check_values(datainput.parse_source(f"{tmp_path}/c.npy"), "integers")
    (tmp_path / "c.csv").write_text("n\n" + "".join(f"{i}\n" for i in range(10)) + "2.5\n")
    source = datainput.parse_source(f"{tmp_path}/c.csv")
    with pytest.raises(
        DataError, match="c.csv line 12, column 1 .n.: found '2.5', needs a non-negative"
    ):
        datacheck.check_values(source, "integers")


def test_sequences_are_read_block_by_block(tmp_path, monkeypatch):
    monkeypatch.setattr(datainput, "SAMPLE_ROWS", 2)
    with h5py.File(tmp_path / "s.h5", "w") as f:
        ds = f.create_dataset("S", (5,), dtype=h5py.vlen_dtype(float))
        for i in range(5):
            ds[i] = np.arange(3.0) if i != 3 else np.array([1.0, np.nan])
    with pytest.raises(DataError, match="row 3 contains a NaN"):
        datacheck.check_values(datainput.parse_source(f"{tmp_path}/s.h5:/S"), "sequences")


def test_the_out_dir_must_be_creatable_and_free(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    assert (
        main(
            _dry_run(
                "--data",
                "builtin:iris",
                "--columns",
                "0:4",
                "--out-dir",
                str(tmp_path / "afile" / "o"),
            )
        )
        == 2
    )
    assert "cannot be created: " in capsys.readouterr().err
    out = tmp_path / "busy"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from mixle_mpi.core import joblock; "
         f"joblock.hold({str(out)!r}, 'output'); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        assert (
            main(_dry_run("--data", "builtin:iris", "--columns", "0:4", "--out-dir", str(out))) == 2
        )
        assert "busy" in capsys.readouterr().err.lower()
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_the_launch_line_is_shell_quoted(tmp_path, capsys):
    out = tmp_path / "a b"
    assert main(_dry_run("--data", "builtin:iris", "--columns", "0:4", "--out-dir", str(out))) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("launch: "))
    argv = shlex.split(line[len("launch: ") :])
    assert argv[argv.index("--out-dir") + 1] == str(out)


def test_a_composite_models_table_and_csv_sequences_are_read_to_the_end(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("x,kind,n\n" + "1.5,a,3\n" * 50 + "2.5,b,-1\n")
    with pytest.raises(
        DataError, match=r"t.csv line 52, column 3: found '-1', needs a non-negative"
    ):
        datacheck.check_values(
            datainput.parse_source(str(table)),
            "table",
            None,
            ("gaussian", "categorical", "poisson"),
        )
    seqs = tmp_path / "s.csv"
    seqs.write_text("1,2,3\n4,5\n" * 20 + "6,inf\n")
    with pytest.raises(DataError, match="s.csv line 41: found 'inf', needs a finite number"):
        datacheck.check_values(datainput.parse_source(str(seqs)), "sequences")
