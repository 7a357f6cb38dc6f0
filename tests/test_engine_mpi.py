"""The fused engine under real MPI, on both libraries: the same bits as the in-process
reference of the same engine (``fitting.reference.ShardsInProcess``), from 1 worker computing
every shard without failures and from 3 workers (the driver computing a shard too) with one
SIGKILLed mid-E-step and respawned. The other exactness and chaos tests run for any engine
with ``MIXLE_MPI_ENGINE`` set (their reference follows it: tests/conftest.py)."""

from __future__ import annotations

import pytest
from conftest import with_libraries
from mpiharness import fit_args, run_job, same_fit

from mixle_mpi.chaos.fault_plan import FIRED_ENV, read_fired, unfired

pytestmark = pytest.mark.mpijob

FUSED = {"MIXLE_MPI_ENGINE": "fused"}


@pytest.mark.parametrize("library, model, n", with_libraries([("diag", 3000)]))
def test_fused_bits_survive_a_kill_and_ignore_w(library, model, n, tmp_path, reference):
    _, python = library
    args = fit_args(model, n, 4, 2, 5)
    alone_env = {**FUSED, "MIXLE_MPI_DRIVER_COMPUTES": "0"}
    alone = run_job(python, 2, args, tmp_path / "alone", env=alone_env)
    assert alone.rc == 0, alone.describe()
    start = next(e for e in alone.events if e["event"] == "start")
    assert start["settings"]["engine"] == "fused"
    assert same_fit(alone.result, reference(model, n, 4, 2, 5, 7, engine="fused")), alone.describe()
    log = tmp_path / "faults.jsonl"
    plan = "2:kill:estep_mid:1"
    killed = run_job(
        python, 4, args, tmp_path / "killed", plan=plan, env={**FUSED, FIRED_ENV: str(log)}
    )
    assert killed.rc == 0, killed.describe()
    assert unfired(plan, read_fired(str(log))) == [], killed.describe()
    assert any(e["event"] == "failure_detected" for e in killed.events), killed.describe()
    assert same_fit(alone.result, killed.result), killed.describe()
