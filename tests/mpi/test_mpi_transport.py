"""transport against real ranks: Link.post/poll/progress, Backoff, finish_sends, abort_peers."""

from __future__ import annotations

import time

import numpy as np
import pytest
from mpitools import WAIT, DeadlineLink, Ended, recv, wait_until

from mixle_mpi.core.protocol import TAG_CMD, TAG_HB, TAG_REPLY
from mixle_mpi.runtime.transport import Backoff, Link, abort_peers, finish_sends
from mixle_mpi.runtime.worker import Worker

pytestmark = pytest.mark.mpi(min_size=3)

TAG_BULK = 77  # a tag of this test's own, never one the driver or worker uses


def test_post_poll_progress_between_the_driver_and_each_worker(comm):
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank == 0:
        links = {r: Link(comm, comm, r) for r in range(1, size)}
        assert all(link.poll(TAG_REPLY) is None for link in links.values())  # nothing was sent yet
        for r, link in links.items():
            link.post({"to": r, "x": np.arange(10.0 * r)})
        finish_sends(links.values(), WAIT)
        assert all(link.progress() for link in links.values())  # every send completed
        for r, link in links.items():
            assert recv(link, TAG_REPLY) == ("echo", r, float(np.arange(10.0 * r).sum()))
            assert link.poll(TAG_REPLY) is None  # exactly one reply each
    else:
        link = Link(comm, comm, 0)
        msg = recv(link, TAG_CMD)
        assert msg["to"] == rank and np.array_equal(msg["x"], np.arange(10.0 * rank))
        link.post(("echo", rank, float(msg["x"].sum())), TAG_REPLY)
        wait_until(link.progress, "the echo to leave")


def test_poll_takes_only_its_peer_its_tag_and_its_communicator(comm):
    """Each worker sends X on the heartbeat communicator, then Y on the data communicator,
    both with TAG_HB. Were the two one communicator, X would match first (MPI keeps the order
    of one sender's messages with one tag); the data poll must get Y."""
    rank, size = comm.Get_rank(), comm.Get_size()
    hb = comm.Dup()
    if rank == 0:
        for r in range(1, size):
            link = Link(comm, hb, r)
            assert recv(link, TAG_HB) == ("data", r)  # Y, never X
            assert recv(link, TAG_HB, comm=link.hb) == ("hb", r)  # X on its own communicator
            assert recv(link, TAG_REPLY) == ("reply", r)  # from this peer only
            assert link.poll(TAG_HB) is None and link.poll(TAG_HB, comm=link.hb) is None
            assert link.poll(TAG_REPLY) is None and link.poll(TAG_CMD) is None
    else:
        beats = Link(hb, hb, 0)
        beats.post(("hb", rank), TAG_HB)
        link = Link(comm, hb, 0)
        link.post(("data", rank), TAG_HB)
        link.post(("reply", rank), TAG_REPLY)
        finish_sends([beats, link], WAIT)
        assert beats.progress() and link.progress()


def test_backoff_grows_to_its_cap_and_resets():
    backoff = Backoff(0.001, 0.004)
    delays = []
    for _ in range(4):
        delays.append(backoff.delay)
        backoff.sleep()
    assert delays == [0.001, 0.002, 0.004, 0.004]
    backoff.reset()
    assert backoff.delay == 0.001


def test_finish_sends_returns_at_its_deadline_while_a_peer_does_not_receive(comm):
    """A 16 MiB message cannot complete before its receiver posts a receive; finish_sends
    must give up after ``wait``, and complete the sends once the workers take them."""
    rank, size = comm.Get_rank(), comm.Get_size()
    payload = bytes(16 << 20)
    if rank == 0:
        links = [Link(comm, comm, r) for r in range(1, size)]
        for link in links:
            link.post(payload, TAG_BULK)
        t0 = time.monotonic()
        finish_sends(links, 0.3)
        waited = time.monotonic() - t0
        assert 0.3 <= waited < 5.0, waited
        assert not any(link.progress() for link in links), (
            "a rendezvous send completed with no receiver"
        )
        for link in links:
            link.post("take it", TAG_CMD)
        finish_sends(links, WAIT)
        assert all(link.progress() for link in links)
    else:
        link = Link(comm, comm, 0)
        assert recv(link, TAG_CMD) == "take it"
        assert recv(link, TAG_BULK) == payload


def test_abort_peers_ends_a_real_worker_loop_with_the_drivers_code(comm, no_exit):
    """The worker loop (Worker.serve) obeys abort_peers; its process exit is replaced by an
    exception here (``no_exit``), so the pytest rank lives on."""
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank == 0:
        abort_peers(comm, range(1, size), 7, wait=WAIT)
    else:
        worker = Worker(DeadlineLink(comm, comm, 0), spawned=False)
        with pytest.raises(Ended) as ended:
            worker.serve()
        assert ended.value.code == 7
