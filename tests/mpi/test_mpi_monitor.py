"""The driver's Monitor against real worker heartbeat threads (Worker.start_heartbeats)."""

from __future__ import annotations

import time

import pytest
from mpitools import WAIT, DeadlineLink, recv, wait_until

from mixle_mpi.runtime.monitor import Monitor
from mixle_mpi.runtime.transport import Link, finish_sends
from mixle_mpi.runtime.worker import Worker

pytestmark = pytest.mark.mpi(min_size=3)

PERIOD, TIMEOUT = 0.05, 1.0
TAG_CTL = 78  # the test's own control messages, on the test's communicator


def _tell(comm, ranks, what) -> None:
    links = [Link(comm, comm, r) for r in ranks]
    for link in links:
        link.post(what, TAG_CTL)
    finish_sends(links, WAIT)


def _watch_for(monitor: Monitor, seconds: float) -> dict:
    """Every suspect the monitor names within ``seconds``."""
    found: dict = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        found.update(monitor.take_suspects())
        time.sleep(PERIOD)
    return found


def _beating_worker(comm, data, hb, busy: bool = False) -> Worker:
    worker = Worker(DeadlineLink(data, hb, 0), spawned=False)
    worker.worker_id = comm.Get_rank()
    worker.busy = busy
    worker.start_heartbeats(PERIOD, driver_timeout=WAIT)
    return worker


def _stop_beating(worker: Worker) -> None:
    # The heartbeat thread's own loop condition (set by Worker.stop before the process
    # exits): the rank lives on, silent, as a rank whose heartbeat thread died would be.
    worker._stopping = True


def test_monitor_hears_every_worker_then_names_the_one_that_stops_beating(comm, no_exit):
    rank, size = comm.Get_rank(), comm.Get_size()
    data, hb = comm.Dup(), comm.Dup()
    silent = size - 1
    if rank == 0:
        monitor = Monitor(PERIOD, TIMEOUT)
        for r in range(1, size):
            monitor.watch(r, Link(data, hb, r))
        monitor.start()
        try:
            # Two timeouts of beats from everyone: nobody is suspect.
            assert _watch_for(monitor, 2 * TIMEOUT) == {}
            _tell(comm, [silent], "stop beating")
            suspects = wait_until(
                monitor.take_suspects, "the monitor to name a suspect", timeout=10 * TIMEOUT
            )
            assert set(suspects) == {silent}, suspects
            cause, when = suspects[silent]
            assert cause.startswith("heartbeat: silent for"), cause
            assert abs(time.time() - when) < WAIT
            monitor.forget(silent)  # as the driver does when it fails a worker
            # The workers still beating stay trusted.
            assert _watch_for(monitor, 2 * TIMEOUT) == {}
        finally:
            monitor.stop()
            _tell(comm, range(1, size), "done")
    else:
        worker = _beating_worker(comm, data, hb)
        ctl = Link(comm, comm, 0)
        msg = recv(ctl, TAG_CTL)
        if msg == "stop beating":
            _stop_beating(worker)
            msg = recv(ctl, TAG_CTL)
        assert msg == "done"
        _stop_beating(worker)


def test_monitor_names_a_busy_worker_that_makes_no_progress_as_stalled(comm, no_exit):
    """Beats keep coming, but the main thread reports no progress on its task: stuck."""
    rank, size = comm.Get_rank(), comm.Get_size()
    data, hb = comm.Dup(), comm.Dup()
    stuck = 1
    if rank == 0:
        monitor = Monitor(PERIOD, TIMEOUT, stall_timeout=TIMEOUT)
        for r in range(1, size):
            monitor.watch(r, Link(data, hb, r))
        monitor.start()
        try:
            suspects = wait_until(
                monitor.take_suspects, "the monitor to name a stalled worker", timeout=10 * TIMEOUT
            )
            assert set(suspects) == {stuck}, suspects
            assert suspects[stuck][0].startswith("stalled:"), suspects
            monitor.forget(stuck)  # as the driver does when it fails a worker
            assert _watch_for(monitor, 2 * TIMEOUT) == {}  # the idle ones are fine
        finally:
            monitor.stop()
            _tell(comm, range(1, size), "done")
    else:
        worker = _beating_worker(comm, data, hb, busy=(rank == stuck))
        assert recv(Link(comm, comm, 0), TAG_CTL) == "done"
        _stop_beating(worker)


def _relayed_worker(comm, data, hb) -> None:
    """A worker that beats until told to stop or done, and checks the role it was given."""
    worker = _beating_worker(comm, data, hb)
    ctl = Link(comm, comm, 0)
    while (msg := recv(ctl, TAG_CTL)) != "done":
        if msg == "stop beating":
            _stop_beating(worker)
        else:  # ("role", relay rank, members): what the driver's plan gave this worker
            assert (worker.fanin.role.relay, worker.fanin.role.members) == msg[1:], (
                worker.fanin.role
            )
    _stop_beating(worker)


def _relaying_monitor(data, hb, size: int) -> Monitor:
    """A started monitor with fan-in at 1: one relay (worker 1) for every other worker."""
    monitor = Monitor(PERIOD, TIMEOUT, max_direct=1)
    for r in range(1, size):
        monitor.watch(r, Link(data, hb, r))
    monitor.start()
    return monitor


def test_a_relayed_worker_that_stops_beating_is_named_through_its_relay(comm, no_exit):
    """Fan-in with one relay (max_direct=1): worker 1 relays for worker 2, whose silence
    reaches the driver through worker 1's beats; worker 1 alone then beats directly."""
    rank, size = comm.Get_rank(), comm.Get_size()
    data, hb = comm.Dup(), comm.Dup()
    if rank == 0:
        monitor = _relaying_monitor(data, hb, size)
        try:
            assert _watch_for(monitor, 2 * TIMEOUT) == {}  # members heard through the relay
            assert monitor.relays() == {r: 1 for r in range(2, size)}
            _tell(comm, [1], ("role", None, tuple((r, r) for r in range(2, size))))
            _tell(comm, range(2, size), ("role", 1, ()))
            _tell(comm, [size - 1], "stop beating")
            suspects = wait_until(
                monitor.take_suspects, "the monitor to name the silent member", timeout=10 * TIMEOUT
            )
            assert set(suspects) == {size - 1}, suspects
            assert "heard through its relay, worker 1" in suspects[size - 1][0], suspects
            for r in range(2, size):
                monitor.forget(r)
            assert _watch_for(monitor, 2 * TIMEOUT) == {}  # the relay alone beats directly
            assert monitor.relays() == {}
            _tell(comm, [1], ("role", None, ()))
        finally:
            monitor.stop()
            _tell(comm, range(1, size), "done")
    else:
        _relayed_worker(comm, data, hb)


def test_when_a_relay_stops_beating_its_members_beat_to_the_driver_again(comm, no_exit):
    rank, size = comm.Get_rank(), comm.Get_size()
    data, hb = comm.Dup(), comm.Dup()
    if rank == 0:
        monitor = _relaying_monitor(data, hb, size)
        try:
            assert _watch_for(monitor, 2 * TIMEOUT) == {}
            _tell(comm, [1], "stop beating")
            suspects = wait_until(
                monitor.take_suspects, "the monitor to name the silent relay", timeout=10 * TIMEOUT
            )
            assert set(suspects) == {1}, suspects
            monitor.forget(
                1
            )  # as the driver does when it fails a worker: its members get new roles
            assert _watch_for(monitor, 3 * TIMEOUT) == {}  # and are heard, not taken for dead
            survivors = list(range(2, size))
            assert monitor.relays() == {r: 2 for r in survivors[1:]}
            _tell(comm, [2], ("role", None, tuple((r, r) for r in survivors[1:])))
        finally:
            monitor.stop()
            _tell(comm, range(1, size), "done")
    else:
        _relayed_worker(comm, data, hb)


def test_an_idle_worker_keeps_hearing_the_driver_through_its_answers(comm, no_exit):
    """No command for four times driver_timeout: the monitor's answers to the beats (their
    payload is None) must keep the worker's view of the driver fresh, every one of them
    read (none left to pile up unread), so the worker never gives the driver up."""
    rank, size = comm.Get_rank(), comm.Get_size()
    data, hb = comm.Dup(), comm.Dup()
    if rank == 0:
        monitor = Monitor(PERIOD, TIMEOUT)
        for r in range(1, size):
            monitor.watch(r, Link(data, hb, r))
        monitor.start()
        try:
            assert _watch_for(monitor, 2.0) == {}
            _tell(comm, range(1, size), "check")
            assert _watch_for(monitor, 0.2) == {}
        finally:
            monitor.stop()
            _tell(comm, range(1, size), "done")
    else:
        worker = Worker(DeadlineLink(data, hb, 0), spawned=False)
        worker.worker_id = rank
        worker.start_heartbeats(PERIOD, driver_timeout=0.5)
        ctl = Link(comm, comm, 0)
        assert recv(ctl, TAG_CTL) == "check"
        assert worker.lost is None and worker._beater.is_alive(), "the worker gave its driver up"
        assert time.monotonic() - worker.last_driver < 0.5
        assert recv(ctl, TAG_CTL) == "done"
        _stop_beating(worker)
