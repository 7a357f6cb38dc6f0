"""A real Driver on rank 0 against real workers serving on the other ranks, built the way
handle.py builds them (build_comms, a Monitor watching each worker, Driver.start), with a
tiny dataset; every shard's result must equal the serial computation exactly."""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
from dataclasses import replace

import mixle.stats as st
import numpy as np
import pytest
from mixle.utils.parallel.resilient_em import checkpointed_fold
from mpitools import WAIT, DeadlineLink, Ended

from mixle_mpi.core.deadlines import run_with_deadline
from mixle_mpi.core.errors import WorkerError
from mixle_mpi.core.estep import PROTO, encode_shard, estep_shard, init_shard, score_shard
from mixle_mpi.core.settings import Settings
from mixle_mpi.policy.failover_plan import BY_MESSAGES
from mixle_mpi.policy.reconfig_plan import EMULATED
from mixle_mpi.runtime.driver import Driver
from mixle_mpi.runtime.monitor import Monitor
from mixle_mpi.runtime.startup import build_comms
from mixle_mpi.runtime.transport import Link
from mixle_mpi.runtime.wiring import over_mpi
from mixle_mpi.runtime.worker import Worker
from mixle_mpi.storage.events import EventLog
from mixle_mpi.storage.store import ShardStore

pytestmark = pytest.mark.mpi(min_size=3)

# A long heartbeat timeout: a worker the monitor wrongly took for dead would be fenced
# (SIGKILLed: it is a pytest rank on this host), and this machine may be busy.
SETTINGS = Settings(
    heartbeat_period=0.05,
    heartbeat_timeout=15.0,
    driver_timeout=WAIT,
    reconfigure_timeout=WAIT,
    respawn=False,
)
SHARDS, SUB_CHUNKS = 5, 2
ROUND = 60.0  # seconds one round may take


def _estimator():
    return st.MixtureEstimator([st.GaussianEstimator()] * 2)


def _data() -> np.ndarray:
    rng = np.random.RandomState(5)
    return np.concatenate([rng.normal(-2.0, 1.0, 40), rng.normal(3.0, 0.5, 37)])


def _serve(comm, data, hb) -> None:
    """A worker rank: serve the driver until it says stop (the exit becomes Ended(0))."""
    worker = Worker(DeadlineLink(data, hb, 0, seconds=4 * ROUND), spawned=False)
    worker.worker_id = comm.Get_rank()
    worker.start_heartbeats(SETTINGS.heartbeat_period, SETTINGS.driver_timeout)
    with pytest.raises(Ended) as ended:
        worker.serve()
    assert ended.value.code == 0, "the worker did not end on the driver's stop"


def _with_driver(comm, body, failover: str = "", settings: Settings = SETTINGS) -> None:
    """Rank 0 builds a Driver over the other ranks and runs ``body(driver, estimator, x)``;
    the other ranks serve it. The driver stops its workers whatever ``body`` does."""
    rank, size = comm.Get_rank(), comm.Get_size()
    data, hb = build_comms(comm, tuple(range(size)), WAIT)
    if rank != 0:
        _serve(comm, data, hb)
        return
    workdir = tempfile.mkdtemp(prefix="mixle-mpi-tier-")
    ranks = {w: w for w in range(1, size)}  # worker id (world rank) -> rank in data/hb
    monitor = Monitor(SETTINGS.heartbeat_period, SETTINGS.heartbeat_timeout, SETTINGS.stall_timeout)
    for w, r in ranks.items():
        monitor.watch(w, Link(data, hb, r))
    monitor.start()
    x = _data()
    store = ShardStore.create(os.path.join(workdir, "shards.h5"), x, SHARDS)
    events = EventLog(os.path.join(workdir, "events.jsonl"), echo=None)
    estimator = _estimator()
    encoder = estimator.accumulator_factory().make().acc_to_encoder()
    wiring = over_mpi(data, hb, ranks, settings, None, None, None)
    driver = Driver(
        data,
        ranks,
        size - 1,
        monitor,
        store,
        pickle.dumps(encoder, protocol=PROTO),
        SUB_CHUNKS,
        2,
        settings,
        events,
        (),
        EMULATED,
        wiring,
        failover=failover,
    )
    try:
        run_with_deadline(driver.start, ROUND, "Driver.start (setup and load)")
        body(driver, estimator, x)
    finally:
        driver.close()
        driver.finish()
        store.close()
        events.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _round(driver, *args):
    return run_with_deadline(lambda: driver.run_round(*args), ROUND, f"a {args[0]} round")


def test_run_round_equals_the_serial_computation_exactly(comm, no_exit):
    def body(driver, estimator, x):
        encoder = estimator.accumulator_factory().make().acc_to_encoder()
        chunks = {
            s: encode_shard(encoder, x[s::SHARDS].tolist(), SUB_CHUNKS) for s in range(SHARDS)
        }
        seeds = {s: 1000 + 17 * s for s in range(SHARDS)}

        init = _round(driver, "init", (estimator, 0.5), seeds)
        assert init == {s: init_shard(estimator, 0.5, seeds[s], chunks[s]) for s in range(SHARDS)}
        model = estimator.estimate(*checkpointed_fold(estimator, [init[s] for s in range(SHARDS)]))

        for _ in range(2):  # two EM steps, the second from the first's model
            results = _round(driver, "estep", (estimator, model))
            assert results == {s: estep_shard(estimator, model, chunks[s]) for s in range(SHARDS)}
            model = estimator.estimate(
                *checkpointed_fold(estimator, [results[s] for s in range(SHARDS)])
            )

        scores = _round(driver, "llsum", model)
        assert scores == {s: score_shard(model, chunks[s]) for s in range(SHARDS)}

        assert [r["kind"] for r in driver.rounds] == ["init", "estep", "estep", "llsum"]
        assert all(r["failed"] == [] and r["recomputed"] == [] for r in driver.rounds)
        assert sorted(driver.membership.live()) == list(range(1, comm.Get_size()))

    _with_driver(comm, body)


def test_a_worker_side_exception_reaches_the_driver_as_worker_error(comm, no_exit):
    """A task that raises on a worker (here: no model) is reported, with the worker's rank
    and traceback, and the worker keeps serving until the driver stops it. (The driver
    computes no shard here, so the workers' errors are the ones seen.)"""

    def body(driver, estimator, x):
        assert driver.places.here == []
        with pytest.raises(WorkerError) as err:
            _round(driver, "estep", (estimator, None))
        assert err.value.worker in range(1, comm.Get_size())
        assert err.value.pid != os.getpid() and "Traceback" in err.value.text

    _with_driver(comm, body, settings=replace(SETTINGS, driver_computes=False))


def test_the_drivers_own_shard_raising_is_a_worker_error_of_rank_0(comm, no_exit):
    """The driver computes its own shards after dispatching the workers' (driver_computes):
    the same bad task raises there first, and is reported the same way, as rank 0's, with
    its traceback. The workers keep serving until the driver stops them."""

    def body(driver, estimator, x):
        assert driver.places.here == list(
            range(SHARDS // comm.Get_size())
        )  # a worker's share, the lowest ids
        with pytest.raises(WorkerError) as err:
            _round(driver, "estep", (estimator, None))
        assert (err.value.worker, err.value.pid) == (0, os.getpid()), err.value
        assert (
            "the driver, rank 0, computing its own shards" in str(err.value)
            and "Traceback" in err.value.text
        )

    _with_driver(comm, body)


def test_a_worker_that_cannot_read_the_checkpoint_folder_drops_out_of_failover(comm, no_exit):
    """Failover asked for: a worker that sees the file the driver wrote beside its checkpoint
    is armed; one that cannot (here: a name that does not exist, as on another node's local
    disk) says why and stays out; each fit's question is answered afresh."""

    def body(driver, estimator, x):
        workers = set(range(1, comm.Get_size()))
        here = os.path.join(tempfile.mkdtemp(prefix="mixle-mpi-reach-"), "ck.h5.reach")
        open(here, "w").close()
        assert (
            run_with_deadline(lambda: driver.reach(here, "the checkpoint's folder"), ROUND, "reach")
            == {}
        )
        gone = here + ".elsewhere"
        lost = run_with_deadline(
            lambda: driver.reach(gone, "the checkpoint's folder"), ROUND, "reach"
        )
        assert set(lost) == workers and all(
            w.startswith("cannot read the checkpoint's folder") for w in lost.values()
        )
        assert driver.unreached == workers
        assert (
            run_with_deadline(lambda: driver.reach(here, "the checkpoint's folder"), ROUND, "reach")
            == {}
        )
        assert driver.unreached == set()

    _with_driver(comm, body, failover=BY_MESSAGES)
