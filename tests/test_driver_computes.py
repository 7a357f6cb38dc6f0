"""Setting ``driver_computes`` (on by default): the driver computes a worker's share of the
shards itself while that share is at most ``driver_share_max_bytes`` stored. Real jobs under
mpiexec: the same bits as mixle's own ResilientMPEncodedData, a worker killed mid-round is
recovered exactly while the driver's own shards are never orphaned, and over the cap the
driver computes none."""

from __future__ import annotations

import pytest
from mpiharness import OMPI_PYTHON, fit_args, no_leftover_processes, run_job, same_fit

from mixle_mpi.chaos.fault_plan import FIRED_ENV, read_fired, unfired

pytestmark = pytest.mark.mpijob

ON = {"MIXLE_MPI_DRIVER_COMPUTES": "1"}


def test_the_driver_computes_its_share_and_the_bits_are_mixles(tmp_path, reference):
    """2500 rows, by default: S = 16; 2 workers and the driver: the driver computes shards
    0-4 (16 // 3, 25 kB stored, far under the cap), the workers the other 11."""
    job = run_job(OMPI_PYTHON, 3, fit_args("diag", 2500, None, 2, 5), tmp_path)
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference("diag", 2500, 16, 2, 5, 7)), job.describe()
    shares = [e for e in job.events if e["event"] == "driver_shards"]
    assert [e["shards"] for e in shares] == [[0, 1, 2, 3, 4]], job.describe()
    assert (
        shares[0]["setting"] is True
        and 0 < shares[0]["share_bytes"] <= shares[0]["max_bytes"] == 1 << 20
    )
    for r in job.result["rounds"]:
        assert r["reused"] == list(range(16)) and not r["recomputed"], r


def test_over_the_cap_the_driver_computes_no_shard(tmp_path, reference):
    """The same job with driver_share_max_bytes under the share's stored bytes: the driver
    computes nothing, the workers hold all 16 shards, the event says why; the same bits."""
    job = run_job(
        OMPI_PYTHON,
        3,
        fit_args("diag", 2500, None, 2, 5),
        tmp_path,
        env={"MIXLE_MPI_DRIVER_SHARE_MAX_BYTES": "1000"},
    )
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference("diag", 2500, 16, 2, 5, 7)), job.describe()
    shares = [e for e in job.events if e["event"] == "driver_shards"]
    assert [(e["shards"], e["share"], e["max_bytes"]) for e in shares] == [([], 5, 1000)], (
        job.describe()
    )
    assert shares[0]["share_bytes"] > 1000


def test_a_worker_killed_mid_round_is_recovered_and_the_drivers_shards_are_never_orphans(
    tmp_path, reference
):
    """3 workers, 8 shards: the driver computes 0 and 1; worker 1 (shards 2 and 5) dies
    in the middle of E-step 2. Its shards are recomputed on the survivors, exactly."""
    log = tmp_path / "faults.jsonl"
    plan = "1:kill:estep_mid:2"
    job = run_job(
        OMPI_PYTHON,
        4,
        fit_args("gmm1d", 6000, 8, 2, 6),
        tmp_path,
        plan=plan,
        env={**ON, FIRED_ENV: str(log)},
    )
    assert unfired(plan, read_fired(str(log))) == [], job.describe()
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference("gmm1d", 6000, 8, 2, 6, 7)), job.describe()
    recovered = sorted(s for e in job.events if e["event"] == "recovery" for s in e["shards"])
    assert recovered and set(recovered) <= {2, 5}, job.describe()
    assert [e["worker"] for e in job.events if e["event"] == "failure_detected"] == [1], (
        job.describe()
    )
    assert no_leftover_processes(str(tmp_path)) == []
