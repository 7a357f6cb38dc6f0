"""The job's communicators (startup.build_comms) and the shrink paths (runtime.shrink)."""

from __future__ import annotations

import pytest
from mpi4py import MPI
from mpitools import WAIT, recv

from mixle_mpi.core.deadlines import run_with_deadline
from mixle_mpi.core.protocol import TAG_CMD, TAG_HB, TAG_REPLY
from mixle_mpi.policy.reconfig_plan import EMULATED, ULFM, renumber
from mixle_mpi.runtime.keptcomm import KeptComm
from mixle_mpi.runtime.shrink import probe_shrink_method, shrink
from mixle_mpi.runtime.startup import build_comms
from mixle_mpi.runtime.transport import Link, finish_sends

pytestmark = pytest.mark.mpi(min_size=3)


def _round_trip(comm, hb, peers: list[int], what: str) -> None:
    """Rank 0 of ``comm`` sends to each of ``peers`` (their ranks in ``comm``) on the data
    communicator and hears back on it and on ``hb``; every other member answers."""
    me = comm.Get_rank()
    if me == 0:
        links = [Link(comm, hb, p) for p in peers]
        for link in links:
            link.post((what, link.peer))
        finish_sends(links, WAIT)
        for link in links:
            assert recv(link, TAG_REPLY) == (what, "ack", link.peer)
            assert recv(link, TAG_HB, comm=link.hb) == (what, "beat", link.peer)
    else:
        link = Link(comm, hb, 0)
        assert recv(link, TAG_CMD) == (what, me)
        link.post((what, "ack", me), TAG_REPLY)
        beat = Link(hb, hb, 0)
        beat.post((what, "beat", me), TAG_HB)
        finish_sends([link, beat], WAIT)
        assert link.progress() and beat.progress()


def test_build_comms_over_every_rank_gives_two_separate_communicators(comm):
    size = comm.Get_size()
    data, hb = build_comms(comm, tuple(range(size)), WAIT)
    assert data.Get_size() == hb.Get_size() == size
    assert data.Get_rank() == hb.Get_rank() == comm.Get_rank()
    assert (
        MPI.Comm.Compare(data, hb) == MPI.CONGRUENT
    )  # same members and order, not the same communicator
    _round_trip(data, hb, list(range(1, size)), "all")


def test_build_comms_leaves_a_rank_out(comm):
    """A rank the driver did not hear at startup is left out: the others build the job's
    communicators over themselves alone (Create_from_group), in world order."""
    rank, size = comm.Get_rank(), comm.Get_size()
    members = (0,) + tuple(range(2, size))
    if rank not in members:
        return  # rank 1 takes no part, as a rank left out at startup does
    data, hb = build_comms(comm, members, WAIT)
    assert data.Get_size() == hb.Get_size() == len(members)
    assert data.Get_rank() == hb.Get_rank() == members.index(rank)
    _round_trip(data, hb, list(range(1, len(members))), "subset")


def test_emulated_shrink_keeps_every_live_rank_in_order(comm):
    size = comm.Get_size()
    new = run_with_deadline(
        lambda: shrink(comm, list(range(size)), EMULATED, 1), WAIT, "emulated shrink"
    )
    assert new.Get_size() == size and new.Get_rank() == comm.Get_rank()
    assert MPI.Comm.Compare(new, comm) == MPI.CONGRUENT
    hb = run_with_deadline(new.Dup, WAIT, "heartbeat dup")
    _round_trip(new, hb, list(range(1, size)), "shrunk")


def test_emulated_shrink_over_agreed_survivors_renumbers_them_like_the_driver(comm):
    """Worker 1 is left out (as a failed one would be; here it is alive and simply does not
    take part). The survivors get the ranks reconfig_plan.renumber gives them. Their worker ids
    run against their ranks (as after a spare adopted a place): the order is the ranks'."""
    rank, size = comm.Get_rank(), comm.Get_size()
    survivors = list(range(2, size))
    ranks = [0] + survivors[::-1]  # ranks of comm, as the driver passes them (in worker id order)
    if rank not in ranks:
        return
    new = run_with_deadline(lambda: shrink(comm, ranks, EMULATED, 2), WAIT, "emulated shrink")
    worker_of = {r: size + 1 - r for r in survivors}  # rank 2 holds the highest worker id
    numbers = renumber({w: r for r, w in worker_of.items()}, worker_of.values())
    assert new.Get_size() == len(ranks)
    assert new.Get_rank() == (0 if rank == 0 else numbers[worker_of[rank]])
    hb = run_with_deadline(new.Dup, WAIT, "heartbeat dup")
    _round_trip(new, hb, sorted(numbers.values()), "survivors")


def test_ulfm_shrink_with_every_rank_alive(comm):
    """Comm.Shrink, only where the probe finds a working ULFM (Open MPI with --with-ft ulfm)."""
    method, reason = probe_shrink_method()
    methods = comm.allgather(method)  # every rank must take the same branch (a collective follows)
    if any(m != ULFM for m in methods):
        pytest.skip(f"no working ULFM Comm.Shrink here: {reason}")
    size = comm.Get_size()
    new = run_with_deadline(lambda: shrink(comm, list(range(size)), ULFM, 3), WAIT, "ULFM shrink")
    assert new.Get_size() == size and new.Get_rank() == comm.Get_rank()
    hb = run_with_deadline(new.Dup, WAIT, "heartbeat dup")
    _round_trip(new, hb, list(range(1, size)), "ulfm")


def test_a_kept_view_renumbers_the_survivors_and_isolates_their_messages(comm):
    """The survivors of a dead driver where no communicator can be built (srun's keep way):
    rank 0 takes no part, as a dead driver would not. Ranks 1.. become 0.. of the view, the
    startup's two views (build_comms) each carry their own messages, and a message sent on
    the job's communicator before the takeover with the same tag never reaches a view."""
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank == 0:
        comm.isend(("stale", 0), dest=1, tag=TAG_CMD).Wait()  # in flight from the old driver
        return
    view = KeptComm.over(comm, range(1, size))
    assert (view.Get_rank(), view.Get_size()) == (rank - 1, size - 1)
    data, hb = build_comms(view, tuple(range(size - 1)), WAIT)
    assert (data.Get_rank(), hb.Get_size()) == (rank - 1, size - 1)
    _round_trip(data, hb, list(range(1, size - 1)), "kept")
    if rank == 1:  # the stale message is still there, in the job's own band only
        assert recv(Link(comm, comm, 0), TAG_CMD) == ("stale", 0)
        assert data.improbe(source=MPI.ANY_SOURCE, tag=TAG_CMD) is None
    if data.Get_rank() >= 1:  # a second takeover: the view's own survivors
        again = KeptComm.over(data, range(1, size - 1))
        assert again.Get_rank() == data.Get_rank() - 1 and again.generation == 2
        assert again.offset != data.offset and again.base is comm
