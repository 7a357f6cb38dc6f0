"""Issue 13 in real jobs: heartbeat fan-in (relays carry their members' beats) and workers
reading their own shards from the store. Both must leave every bit as it was."""

from __future__ import annotations

import pytest
from conftest import LIBRARIES
from mpiharness import OMPI_PYTHON, fit_args, no_leftover_processes, run_job, same_fit

from mixle_mpi.chaos.fault_plan import read_fired, unfired

pytestmark = pytest.mark.mpijob
MODEL, N, SHARDS, SUB, ITS = "gmm1d", 6000, 4, 1, 5
FANIN_2 = {"MIXLE_MPI_HEARTBEAT_FANIN": "2"}  # 4 workers: worker 1 relays for 2, worker 3 for 4


def _planned_fault_job(python: str, plan: str, tmp_path, reference):
    """A job with fan-in at 2 and one planned fault that must fire; it ends with the
    reference's bits and nothing left over. Returns its failure_detected events."""
    fault_log = tmp_path / "fired.jsonl"
    job = run_job(
        python,
        5,
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path,
        plan=plan,
        timeout=180,
        env={**FANIN_2, "MIXLE_MPI_FAULT_LOG": str(fault_log)},
    )
    assert unfired(plan, read_fired(str(fault_log))) == [], job.describe()
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    assert no_leftover_processes(str(tmp_path)) == []
    return [e for e in job.events if e["event"] == "failure_detected"], job


def _loaded(job) -> dict:
    loaded = [e for e in job.events if e["event"] == "loaded"]
    assert len(loaded) == 1, job.describe()
    return loaded[0]


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("action", ["stop", "kill"])
def test_a_relayed_worker_that_dies_or_hangs_is_recovered_to_the_same_bits(
    library, action, tmp_path, reference
):
    """Worker 2 beats only to its relay (worker 1). SIGSTOPped, it is seen silent through
    the relay (one hop late); SIGKILLed, by the relay's MPI error (ULFM) or its silence."""
    _, python = library
    detected, job = _planned_fault_job(python, f"2:{action}:estep_before:2", tmp_path, reference)
    assert [e["worker"] for e in detected] == [2], job.describe()
    cause = detected[0]["cause"]
    if action == "stop":
        assert "heard through its relay, worker 1" in cause, cause
    else:  # the driver's own traffic, the relay's ULFM error or the silence: whichever came first
        assert cause.startswith(("ulfm:", "heartbeat:")), cause


def test_a_dead_relays_members_beat_to_the_driver_and_the_fit_ends_with_the_same_bits(
    tmp_path, reference
):
    """Worker 1, the relay of worker 2, is SIGSTOPped: the driver fails it and gives worker 2
    a new role; worker 2 is not taken for dead meanwhile."""
    detected, job = _planned_fault_job(OMPI_PYTHON, "1:stop:estep_before:2", tmp_path, reference)
    assert [e["worker"] for e in detected] == [1], job.describe()


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("model,n,sub", [("gmm1d", 5000, 1), ("hmm", 400, 2)])
def test_own_reads_and_streaming_give_the_same_bits(library, model, n, sub, tmp_path, reference):
    """Every worker reads its own shards (the store is on this host's file system; the size
    threshold set to 0); with ``workers_read_store`` off the driver streams them. Native and
    general row kinds."""
    _, python = library
    want = reference(model, n, 3, sub, 4, 7)
    for mode, readers in (("1", [1, 2, 3]), ("0", [])):
        job = run_job(
            python,
            4,
            fit_args(model, n, 3, sub, 4),
            tmp_path / f"read{mode}",
            env={"MIXLE_MPI_WORKERS_READ_STORE": mode, "MIXLE_MPI_OWN_READ_MIN_BYTES": "0"},
        )
        assert job.rc == 0, job.describe()
        assert _loaded(job)["read_by_workers"] == readers, job.describe()
        assert same_fit(job.result, want), job.describe()
