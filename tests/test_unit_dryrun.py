"""``mixle-mpi fit --dry-run``: layout, memory, MPI and launch command, with nothing launched."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import h5py
import numpy as np
import pytest

from mixle_mpi.cli import datainput, dryrun
from mixle_mpi.cli.commands import main
from mixle_mpi.core.errors import ConfigError
from mixle_mpi.fitting import modelspec


@pytest.fixture
def h5data(tmp_path):
    path = tmp_path / "m.h5"
    with h5py.File(path, "w") as f:
        f["/run1/X"] = np.zeros((10_000, 4))
    return path


@pytest.fixture
def no_launch(monkeypatch):
    """Fail the test if anything but ``mpiexec [FLAG] --version`` (a probe) is started."""
    real = subprocess.Popen

    class Guard(real):
        def __init__(self, cmd, *a, **kw):
            assert list(cmd[-1:]) == ["--version"] and "-n" not in cmd, f"a dry run started {cmd}"
            super().__init__(cmd, *a, **kw)

    monkeypatch.setattr(subprocess, "Popen", Guard)


def test_layout_and_memory_per_rank():
    lay = dryrun.layout(rows=1_000_000, num_shards=16, ranks=5)
    assert (lay.workers, lay.num_shards, lay.per_worker, lay.rows_per_shard) == (
        4,
        16,
        (4, 4),
        62_500,
    )
    uneven = dryrun.layout(
        rows=1000, num_shards=None, ranks=4
    )  # the default S comes from the rows alone
    assert (uneven.num_shards, uneven.per_worker) == (16, (5, 6))
    assert dryrun.layout(rows=1000, num_shards=5, ranks=4).per_worker == (1, 2)
    shape = datainput.DataShape(1_000_000, 4, 8, False, "x", 4)
    mem = dryrun.memory(shape, lay)
    assert mem["worker"] == 4 * 62_500 * 4 * 8 + 62_500 * 8 and mem["total"] == 32_000_000
    assert (
        mem["driver"] == 32_000_000
    )  # HDF5 is streamed in 64 MiB blocks: here the whole data is one block
    wide = dryrun.memory(datainput.DataShape(1_000_000, 10_000, 8, False, "x", 10_000), lay)
    assert (
        wide["driver"] == (64 << 20) // 80_000 * 80_000
    )  # 10,000 columns: a block is 64 MiB, not 65,536 rows
    csv = dryrun.memory(datainput.DataShape(1_000_000, 4, 8, True, "x", 4), lay)
    assert csv["driver"] == 32_000_000  # a CSV is read whole on the driver
    full = dryrun.memory(
        shape, lay, modelspec.model_bytes(modelspec.parse_spec("gmm:k=3,cov=full"), 4)
    )
    assert (
        full["model"] == 8 * 3 * (16 + 4 + 1)
        and full["worker"] == 4 * 62_500 * 32 + 3 * full["model"] + 62_500 * 3 * 8
    )
    with pytest.raises(
        ConfigError, match="found 10 observations but num_shards=16 needs at least 16"
    ):
        dryrun.layout(rows=10, num_shards=16, ranks=3)
    with pytest.raises(ConfigError, match="found 1 rank"):
        dryrun.layout(rows=10, num_shards=None, ranks=1)


def test_a_fit_too_large_for_memory_is_refused_with_the_estimate():
    """A model or a row too large for memory: exit 2 before any rank works, saying how much
    was needed and how much there is (pure: the host's memory is given)."""
    lay = dryrun.layout(rows=1_000_000, num_shards=16, ranks=5)
    shape = datainput.DataShape(1_000_000, 10_000, 8, False, "x", 10_000)
    huge = modelspec.model_bytes(
        modelspec.parse_spec("gmm:k=50,cov=full"), 10_000
    )  # 50 matrices of 10,000^2
    assert huge[0] > 39e9
    why = dryrun.memory_problem(dryrun.memory(shape, lay, huge), available=20e9, total=24e9)
    assert "the driver would need about" in why and "GB" in why and "free on this host" in why
    why = dryrun.memory_problem(dryrun.memory(shape, lay, huge), available=1e15, total=24e9)
    assert "each worker would need about" in why and "more ranks" in why
    row = dryrun.memory(datainput.DataShape(10, 1e10, 8, False, "x", 1), dryrun.layout(10, 2, 3))
    assert "one row is about" in dryrun.memory_problem(row, available=20e9, total=24e9)
    small = dryrun.memory(
        shape, lay, modelspec.model_bytes(modelspec.parse_spec("gmm:k=3,cov=diag"), 10_000)
    )
    assert dryrun.memory_problem(small, available=20e9, total=24e9) is None
    assert modelspec.model_bytes(modelspec.parse_spec("json:x.json"), 3) == (0, 1)  # not sized


def test_rank_count_from_n_or_slurm():
    assert dryrun.rank_count(SimpleNamespace(n=6), {}) == (6, "-n")
    assert dryrun.rank_count(SimpleNamespace(n=None), {"SLURM_NTASKS": "8"}) == (8, "SLURM_NTASKS")
    assert dryrun.rank_count(SimpleNamespace(n=None), {}) == (None, "")


def test_dry_run_prints_everything_and_launches_nothing(h5data, tmp_path, capsys, no_launch):
    code = main(
        [
            "fit",
            "-n",
            "5",
            "--dry-run",
            "--data",
            f"{h5data}:/run1/X",
            "--model",
            "gmm:k=8,cov=diag",
            "--num-shards",
            "16",
            "--out-dir",
            str(tmp_path / "out"),
            "--checkpoint",
            str(tmp_path / "out" / "ck.h5"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    for needle in (
        "dry run: nothing was launched",
        "shape (10000, 4), float64",
        "layout: 5 ranks (-n) = 1 driver + 4 workers; S = 16 shards of about 625 rows; 3-4 shards per worker, "
        "3 computed by the driver (driver_computes)",
        "each worker about 119 KB",
        "streams the data into the shard store",
        "MPI library (mpi4py): ",
        "mpiexec: ",
        "launch: ",
        " -n 5 ",
        f"{sys.executable} -m mixle_mpi fit --data {h5data}:/run1/X",
        "--num-shards 16",
        "checkpoint ",
        "none yet",
        "will be created",
    ):
        assert needle in out, (needle, out)
    from mpi4py import MPI

    assert not MPI.Is_initialized()  # mpi4py named its library without MPI_Init
    assert not (tmp_path / "out").exists()


def test_dry_run_reads_every_csv_value_without_loading_it(tmp_path, capsys, no_launch, monkeypatch):
    path = tmp_path / "d.csv"
    path.write_text("a,b,c\n" + "1,2,3\n" * 999 + "oops,2,3\n")  # a bad cell on the last line
    monkeypatch.setattr(
        datainput, "_read_numeric", lambda *a: pytest.fail("the dry run loaded the values")
    )
    argv = ["fit", "-n", "3", "--dry-run", "--data", str(path), "--model", "gmm:k=2"]
    assert main([*argv, "--columns", "a,c"]) == 2
    captured = capsys.readouterr()
    assert "d.csv: 1000 data lines x 2 columns (a, c)" in captured.out
    assert "d.csv line 1001, column 1 (a): found 'oops', needs a finite number" in captured.err
    assert main([*argv, "--columns", "b,c"]) == 0  # the bad cell is in a column left out
    out = capsys.readouterr().out
    assert "every value of 1000 rows read and good" in out
    assert "5-6 shards per worker, 5 computed by the driver" in out
    assert "reads the whole data before writing the shard store" in out


def test_dry_run_reports_what_would_stop_the_fit(tmp_path, capsys, no_launch):
    path = tmp_path / "d.csv"
    path.write_text("a,b\n1,2\n3,4\n")
    assert (
        main(
            [
                "fit",
                "-n",
                "3",
                "--dry-run",
                "--data",
                str(path),
                "--columns",
                "q",
                "--model",
                "gmm:k=2",
            ]
        )
        == 2
    )
    captured = capsys.readouterr()
    assert "fit: gmm:k=2" in captured.out  # what was found before the error is still shown
    assert (
        "error: " in captured.err
        and "has no column 'q'; its columns are ['a', 'b']" in captured.err
    )
    assert (
        main(
            [
                "fit",
                "-n",
                "3",
                "--dry-run",
                "--data",
                str(path),
                "--model",
                "gmm:k=2",
                "--mpiexec",
                str(tmp_path / "no-mpiexec"),
            ]
        )
        == 2
    )
    captured = capsys.readouterr()
    assert "mpiexec: NOT USABLE" in captured.out and "error: MPI: " in captured.err


def test_dry_run_without_a_rank_count_says_how_to_get_the_layout(
    h5data, capsys, no_launch, monkeypatch
):
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    assert main(["fit", "--dry-run", "--data", f"{h5data}:/run1/X", "--model", "gmm:k=2"]) == 0
    out = capsys.readouterr().out
    assert (
        "rank count unknown" in out
        and "give -n N" in out
        and "under mpiexec/srun every rank runs" in out
    )


def test_dry_run_tells_what_a_resume_would_do(h5data, tmp_path, capsys, no_launch):
    from mixle_mpi.storage import checkpoint

    ck = tmp_path / "ck.h5"
    state = checkpoint.FitState(
        iteration=7, model="{}", ll=[-2.0], layout={"num_shards": 4, "sub_chunks": 1}
    )
    checkpoint.write(str(ck), state)
    base = [
        "fit",
        "-n",
        "4",
        "--dry-run",
        "--data",
        f"{h5data}:/run1/X",
        "--model",
        "gmm:k=2",
        "--checkpoint",
        str(ck),
    ]
    assert main(base) == 2  # 1000 rows make S = 16 (the default), the checkpoint has 4
    captured = capsys.readouterr()
    assert (
        "resumes after iteration 7; it has num_shards=4 but this run has 16: pass --num-shards 4"
        in captured.out
    )
    assert "error: " in captured.err and "pass --num-shards 4 to resume" in captured.err
    assert main(base + ["--num-shards", "4"]) == 0
    assert "resumes after iteration 7; same layout" in capsys.readouterr().out
    checkpoint.write(str(ck), state)  # the first one becomes ck.h5.prev
    ck.write_bytes(ck.read_bytes()[:100])
    assert main(base + ["--num-shards", "4"]) == 0
    assert "is damaged" in (out := capsys.readouterr().out) and f"falls back to {ck}.prev" in out
    assert main(base + ["--resume", "no"]) == 0
    assert "resume=no: the fit starts afresh and overwrites it" in capsys.readouterr().out
    assert main(base[:-1] + [str(tmp_path / "none.h5"), "--resume", "yes"]) == 2
    assert "resume=yes but there is no checkpoint" in capsys.readouterr().err


def test_dry_run_refuses_far_more_ranks_than_cores_as_the_launch_would(
    h5data, capsys, no_launch, monkeypatch
):
    from mixle_mpi.launch import launcher

    monkeypatch.setattr(launcher, "usable_cores", lambda: 2)
    monkeypatch.delenv(launcher.MANY_RANKS_ENV, raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    base = ["fit", "-n", "300", "--dry-run", "--data", f"{h5data}:/run1/X", "--model", "gmm:k=2"]
    assert main(base) == 2
    assert "found -n 300 but this machine has 2 core(s)" in capsys.readouterr().err
    assert main(base + ["--allow-many-ranks"]) == 0


def test_the_layout_counts_the_drivers_own_share():
    lay = dryrun.layout(rows=1_000_000, num_shards=16, ranks=4, driver_computes=True)
    assert (lay.workers, lay.driver, lay.per_worker) == (3, 4, (4, 4))
    assert dryrun.layout(rows=1_000_000, num_shards=16, ranks=4).driver == 0


def test_the_layout_leaves_the_driver_no_share_over_its_byte_cap():
    # 16 shards of 62,500 rows x 8 bytes: a share of 4 shards is 2 MB
    small = dryrun.layout(
        rows=1_000_000,
        num_shards=16,
        ranks=4,
        driver_computes=True,
        row_bytes=8,
        driver_max_bytes=2_000_000,
    )
    assert (small.driver, small.driver_refused) == (4, 0)
    big = dryrun.layout(
        rows=1_000_000,
        num_shards=16,
        ranks=4,
        driver_computes=True,
        row_bytes=8,
        driver_max_bytes=1_999_999,
    )
    assert (big.driver, big.driver_refused, big.per_worker) == (0, 4, (5, 6))
    assert (
        "the driver computes none: its share, 4 shards, is over driver_share_max_bytes"
        in dryrun._layout_line(big, 4, "-n")
    )
