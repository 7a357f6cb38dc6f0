"""Two jobs in one folder (issue 33), as a careless user makes them: a second fit on a
running fit's output folder is refused with exit 2 within seconds, naming the first, and the
first ends with the bits it has alone. Real ranks under mpiexec."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from mpiharness import OMPI_PYTHON, no_leftover_processes

from mixle_mpi.chaos.fault_plan import FIRED_ENV, read_fired, unfired
from mixle_mpi.core import joblock
from mixle_mpi.core.joblock import LOCK_NAME
from mixle_mpi.fitting.models import get_model

pytestmark = pytest.mark.mpijob
ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}
DELAY = "0:delay:estep_before:2"


def _fit_args(data, out):
    return [
        "-m",
        "mixle_mpi",
        "fit",
        "--data",
        str(data),
        "--model",
        "gmm:k=3,cov=diag",
        "--max-its",
        "40",
        "--delta",
        "none",
        "--seed",
        "3",
        "--out-dir",
        str(out),
        "--progress",
        "off",
    ]


def test_a_second_fit_on_a_running_fits_folder_exits_2_at_once_and_the_first_keeps_its_bits(
    tmp_path,
):
    data = tmp_path / "d.npy"
    np.save(data, get_model("diag").sample(300_000, 5))
    alone, shared = tmp_path / "alone", tmp_path / "shared"
    ref = subprocess.run(
        [OMPI_PYTHON, *_fit_args(data, alone), "-n", "3"],
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
    )
    assert ref.returncode == 0, ref.stderr[-3000:]
    # the first fit's driver pauses 10 s before its third E-step (a chaos delay: same bits),
    # so that it still runs while both second tries start: unpaused it sometimes ended first
    # (20 iterations in 2 s on an idle machine), and the second then ran
    first = subprocess.Popen(
        [OMPI_PYTHON, *_fit_args(data, shared), "-n", "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**ENV, "MIXLE_MPI_FAULT_PLAN": DELAY, FIRED_ENV: str(tmp_path / "fired.jsonl")},
    )
    try:
        lock = shared / LOCK_NAME
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (lock.exists() and lock.read_text().strip()):
            time.sleep(0.05)
        held = json.loads(lock.read_text())
        for how in (
            ["-n", "3"],  # mixle-mpi fit -n: refused before MPI starts
            None,
        ):  # under a launcher it does not know: the driver refuses
            t0 = time.monotonic()
            if how is None:
                cmd = [
                    OMPI_PYTHON,
                    "-m",
                    "mixle_mpi",
                    "run",
                    "-n",
                    "3",
                    "--",
                    OMPI_PYTHON,
                    *_fit_args(data, shared),
                ]
            else:
                cmd = [OMPI_PYTHON, *_fit_args(data, shared), *how]
            second = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=ENV)
            took = time.monotonic() - t0
            assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-3000:]
            assert (
                "is in use by another job" in second.stderr
                and f"pid {held['pid']}" in second.stderr
            ), second.stderr
            assert took < 30, took
            assert first.poll() is None, (
                "the first fit ended before the second one was refused: make it longer"
            )
        out, _ = first.communicate(timeout=300)
        assert first.returncode == 0, out[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert unfired(DELAY, read_fired(str(tmp_path / "fired.jsonl"))) == []
    for name in ("model.json",):
        assert (shared / name).read_text() == (alone / name).read_text()
    assert no_leftover_processes(str(shared)) == []


HOLD_CHECKPOINT = (
    "import sys, time; from mixle_mpi.runtime.handle import hold_checkpoint; "
    "hold_checkpoint(sys.argv[1]); print('held', flush=True); time.sleep(60)"
)


def test_two_fits_with_their_own_out_dirs_and_one_checkpoint_are_refused(tmp_path):
    """Before, only the folders were locked: two fits with different --out-dir and the same
    --checkpoint both ran and rotated each other's files. The checkpoint is locked too: the
    second fit exits 2 naming the first, before MPI starts under `fit -n` and in the driver."""
    ck = tmp_path / "shared" / "ck.h5"
    ck.parent.mkdir()
    first = subprocess.Popen(
        [sys.executable, "-c", HOLD_CHECKPOINT, str(ck)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert first.stdout.readline().strip() == "held"
        from mixle_mpi.runtime.handle import hold_checkpoint

        with pytest.raises(joblock.FolderBusy, match=f"pid {first.pid}.*--checkpoint"):
            hold_checkpoint(str(ck))  # the driver's own check (fitloop: claim_checkpoint)
        second = subprocess.run(
            [sys.executable, "-m", "mixle_mpi", "fit", "-n", "2", "--model", "gmm:k=2"]
            + ["--data", "builtin:iris", "--columns", "0:4", "--out-dir", str(tmp_path / "out2")]
            + ["--checkpoint", str(ck)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2 and f"pid {first.pid}" in second.stderr, second.stderr
        assert "launching" not in second.stderr  # refused before MPI starts
    finally:
        first.kill()
        first.wait()
        first.stdout.close()
    assert not (tmp_path / "out2" / "work").exists()
    assert joblock.hold_file(str(ck), "checkpoint") is not None  # a dead job's: taken over
    joblock.release_all()
