"""The handle is a drop-in for every mixle entry point, bit for bit, even through a failure."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess

import pytest
from conftest import with_libraries
from mpiharness import REPO

pytestmark = pytest.mark.mpijob
JOB = REPO / "tests" / "jobs" / "api_surface.py"


def _load_exercise():
    spec = importlib.util.spec_from_file_location("api_surface", JOB)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.exercise


@functools.lru_cache(maxsize=None)
def _reference(model: str, n: int, shards: int) -> dict:
    """mixle's own backend through the same entry points (computed once per session)."""
    from mixle.utils.parallel.resilient_em import ResilientMPEncodedData

    from mixle_mpi.fitting.models import get_model

    m = get_model(model)
    est = m.estimator()
    with ResilientMPEncodedData(m.sample(n, 1), estimator=est, num_workers=shards) as enc:
        return _load_exercise()(enc, est)


@pytest.mark.parametrize("library", with_libraries([()], id_of=lambda row: "api"))
@pytest.mark.parametrize(
    "plan", [None, "2:kill:estep_mid:3,1:stop:llsum:2"], ids=["clean", "kill+stop"]
)
def test_every_entry_point_is_bit_identical(library, plan, tmp_path):
    _, python = library
    model, n, shards = "composite", 3000, 3
    out = tmp_path / "api.json"
    env = dict(
        os.environ,
        PYTHONWARNINGS="ignore",
        MIXLE_MPI_FAULT_PLAN=plan or "",
        MIXLE_MPI_EVENT_LOG=str(tmp_path / "events.jsonl"),
    )
    cmd = [
        python,
        "-m",
        "mixle_mpi",
        "run",
        "-n",
        "4",
        "--timeout",
        "240",
        "--",
        python,
        str(JOB),
        model,
        str(n),
        str(shards),
        str(out),
        str(tmp_path / "work"),
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, cwd=str(tmp_path), env=env
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    got = json.loads(out.read_text())
    rounds = got.pop("rounds")
    ref = _reference(model, n, shards)
    for key in ref:
        assert got[key] == ref[key], f"{key} differs from mixle's ResilientMPEncodedData"
    if plan:
        assert sum(len(r["failed"]) for r in rounds) == 2
