"""Hot spares (issue 11): extra ranks started idle take a failed worker's place at once,
without Spawn, and the fit ends with the same bits as a failure-free run."""

from __future__ import annotations

import pytest
from conftest import LIBRARIES
from mpiharness import fit_args, no_leftover_processes, run_job, same_fit

from mixle_mpi.policy.faults import read_fired, unfired

pytestmark = pytest.mark.mpijob
MODEL, N, SHARDS, SUB, ITS = "gmm1d", 6000, 4, 2, 5


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_spare_takes_the_dead_workers_place_without_spawn(library, tmp_path, reference):
    """4 ranks with spares=1: workers 1 and 2 hold the shards (the driver computes none here:
    this test names who holds which), rank 3 waits. Worker 1 is SIGKILLed mid E-step; with
    respawn off (as under srun), the spare adopts its place."""
    _, python = library
    plan, fault_log = "1:kill:estep_mid:2", tmp_path / "fired.jsonl"
    job = run_job(python, 4, fit_args(MODEL, N, SHARDS, SUB, ITS), tmp_path, plan=plan, timeout=180,
                  env={"MIXLE_MPI_SPARES": "1", "MIXLE_MPI_RESPAWN": "0", "MIXLE_MPI_FAULT_LOG": str(fault_log),
                       "MIXLE_MPI_DRIVER_COMPUTES": "0"})
    assert unfired(plan, read_fired(str(fault_log))) == [], job.describe()
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    start = next(e for e in job.events if e["event"] == "start")
    assert (start["workers"], start["spares"]) == (2, 1)
    adopted = [e for e in job.events if e["event"] == "spare_adopted"]
    assert [(e["worker"], e["spare"], e["shards"]) for e in adopted] == [(1, 3, [0, 2])], job.describe()
    assert adopted[0]["warm"] == [0, 2]  # the spare recomputed both orphans and kept them: nothing to load
    recovered = [e for e in job.events if e["event"] == "recovery"]
    assert [(e["worker"], e["shards"]) for e in recovered] == [(3, [0, 2])]
    assert not [e for e in job.events if e["event"] in ("respawned", "blacklisted", "migrated")]
    assert no_leftover_processes(str(tmp_path)) == []
