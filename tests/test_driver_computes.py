"""Setting ``driver_computes``: the driver computes a worker's share of the shards itself.
Real jobs under mpiexec: the same bits as mixle's own ResilientMPEncodedData, and a worker
killed mid-round is recovered exactly while the driver's own shards are never orphaned."""

from __future__ import annotations

import pytest
from mpiharness import OMPI_PYTHON, fit_args, no_leftover_processes, run_job, same_fit

from mixle_mpi.policy.faults import FIRED_ENV, read_fired, unfired

pytestmark = pytest.mark.mpijob

ON = {"MIXLE_MPI_DRIVER_COMPUTES": "1"}


def test_the_driver_computes_its_share_and_the_bits_are_mixles(tmp_path, reference):
    """2500 rows: the default S = 16; 2 workers and the driver: the driver computes shards
    0-4 (16 // 3), the workers the other 11."""
    job = run_job(OMPI_PYTHON, 3, fit_args("diag", 2500, None, 2, 5), tmp_path, env=ON)
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference("diag", 2500, 16, 2, 5, 7)), job.describe()
    shares = [e["shards"] for e in job.events if e["event"] == "driver_shards"]
    assert shares == [[0, 1, 2, 3, 4]], job.describe()
    for r in job.result["rounds"]:
        assert r["reused"] == list(range(16)) and not r["recomputed"], r


def test_a_worker_killed_mid_round_is_recovered_and_the_drivers_shards_are_never_orphans(tmp_path, reference):
    """3 workers, 8 shards: the driver computes 0 and 1; worker 1 (shards 2 and 5) dies
    in the middle of E-step 2. Its shards are recomputed on the survivors, exactly."""
    log = tmp_path / "faults.jsonl"
    plan = "1:kill:estep_mid:2"
    job = run_job(OMPI_PYTHON, 4, fit_args("gmm1d", 6000, 8, 2, 6), tmp_path, plan=plan,
                  env={**ON, FIRED_ENV: str(log)})
    assert unfired(plan, read_fired(str(log))) == [], job.describe()
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference("gmm1d", 6000, 8, 2, 6, 7)), job.describe()
    recovered = sorted(s for e in job.events if e["event"] == "recovery" for s in e["shards"])
    assert recovered and set(recovered) <= {2, 5}, job.describe()
    assert [e["worker"] for e in job.events if e["event"] == "failure_detected"] == [1], job.describe()
    assert no_leftover_processes(str(tmp_path)) == []
