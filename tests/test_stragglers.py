"""A slow worker under mpiexec (the ``slow`` chaos action: each of its shards takes k times
as long from some round on, its heartbeats go on): idle workers copy its outstanding shards
within a round, shards move off it between rounds, and the bits are the failure-free fit's,
with no failure declared. Both MPI libraries."""

from __future__ import annotations

import pytest
from conftest import LIBRARIES
from mpiharness import fit_args, no_leftover_processes, run_job, same_fit

from mixle_mpi.chaos.fault_plan import FIRED_ENV, read_fired, unfired

pytestmark = pytest.mark.mpijob

ROWS, SHARDS, ITS = 60000, 12, 10


@pytest.mark.parametrize("lib", LIBRARIES)
def test_a_slow_worker_is_copied_then_placed_around_with_the_same_bits(tmp_path, reference, lib):
    """3 workers (the driver computes none), 12 shards; worker 2 turns 8 times slower at
    E-step 1: its tail is copied by the idle workers and won there, it is told to skip it,
    and after 3 slow rounds shards move off it; exact, no failure detected."""
    _, python = lib
    log = tmp_path / "faults.jsonl"
    plan = "2:slow:estep_before:1:0::8"
    job = run_job(
        python,
        4,
        fit_args("gmm1d", ROWS, SHARDS, 1, ITS),
        tmp_path,
        plan=plan,
        env={FIRED_ENV: str(log), "MIXLE_MPI_DRIVER_COMPUTES": "0"},
    )
    assert unfired(plan, read_fired(str(log))) == [], job.describe()
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference("gmm1d", ROWS, SHARDS, 1, ITS, 7)), job.describe()
    ev = job.events
    assert not [e for e in ev if e["event"] == "failure_detected"], job.describe()
    copied = [e for e in ev if e["event"] == "speculated"]
    assert copied and all(set(e["stragglers"]) == {"2"} for e in copied), job.describe()
    won = [s for e in ev if e["event"] == "speculation_won" for s in e["shards"]]
    assert won and set(won) <= {1, 4, 7, 10}, (
        job.describe()
    )  # worker 2's own shards (placed round robin)
    moved = [e for e in ev if e["event"] == "rebalanced"]
    assert moved and all(src == 2 for e in moved[:1] for src, _ in e["moves"].values()), (
        job.describe()
    )
    assert moved[0]["shards"]["2"] < SHARDS // 3, job.describe()
    assert no_leftover_processes(str(tmp_path)) == []
