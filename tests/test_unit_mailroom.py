"""The driver's messages (runtime/mailroom.py) over stand-in links: what reaches the driver's
failure handling, which replies come back and in what order, and who gets rung. The MPI
side of a link is tested in tests/mpi/test_mpi_transport.py and by every MPI job.

The module under test imports mpi4py's MPI, and collecting this file must not initialize MPI
in pytest's process (tests/test_unit_dryrun.py checks a dry run never does): it is imported
by the tests themselves, after that check has run.
"""

from __future__ import annotations

import pytest

from mixle_mpi.core.errors import WorkerError
from mixle_mpi.core.protocol import TAG_CMD, TAG_REPLY, Result, TaskError


def _peer_failed() -> Exception:
    from mixle_mpi.runtime.transport import PeerFailed

    return PeerFailed(75, "process failed")


class FakeLink:
    """A link whose peer answered ``replies``; ``dead``: every MPI call fails (ULFM)."""

    def __init__(self, peer: int, replies=(), dead: bool = False, pending_sends: int = 0) -> None:
        self.comm, self.peer, self.inter = (
            object(),
            peer,
            None,
        )  # not an Intracomm: drained link by link
        self.replies, self.dead = list(replies), dead
        self.sends = [object()] * pending_sends
        self.posted: list = []

    def post(self, msg, tag) -> None:
        if self.dead:
            raise _peer_failed()
        self.posted.append((tag, msg))

    def progress(self) -> bool:
        if self.dead:
            raise _peer_failed()
        return not self.sends

    def poll(self, tag):
        if self.dead:
            raise _peer_failed()
        assert tag == TAG_REPLY
        return self.replies.pop(0) if self.replies else None


class FakeBell:
    address = "driver-bell"

    def __init__(self, unreachable=()) -> None:
        self.rung: list[list[str]] = []
        self.unreachable = set(unreachable)

    def ring_all(self, addresses):
        self.rung.append(list(addresses))
        return [a not in self.unreachable for a in addresses]


def mailroom(links, bell=None):
    from mixle_mpi.runtime.mailroom import Mailroom

    failed: list[tuple[int, str]] = []
    room = Mailroom(links, bell, lambda w, cause: failed.append((w, cause)))
    return room, failed


def test_a_post_reaches_the_link_and_a_dead_peer_goes_to_the_drivers_failure_handling():
    room, failed = mailroom({1: FakeLink(1), 2: FakeLink(2, dead=True)})
    assert room.post(1, "task") is True and room.links[1].posted == [(TAG_CMD, "task")]
    assert room.post(2, "task") is False
    assert failed and failed[0][0] == 2 and "send failed" in failed[0][1]
    assert room.post(3, "task") is False and len(failed) == 1  # nobody there: nothing to fail


def test_drain_returns_what_a_wildcard_kept_first_then_the_links_replies_in_order():
    room, failed = mailroom({1: FakeLink(1, replies=["b", "c"])})
    room.stash[1] = ["a"]
    assert room.drain(1) == ["a", "b", "c"]
    assert room.drain(1) == [] and 1 not in room.stash and not failed


def test_a_worker_that_fails_mid_drain_keeps_what_came_before_and_is_failed():
    link = FakeLink(1, replies=["a"])
    room, failed = mailroom({1: link})
    room.stash[1] = ["kept"]
    link.dead = True
    assert room.drain(1) == ["kept"] and failed[0][0] == 1


def test_gather_drains_each_link_that_shares_no_communicator():
    room, failed = mailroom(
        {1: FakeLink(1, replies=["x"]), 2: FakeLink(2), 3: FakeLink(3, replies=["y", "z"])}
    )
    assert room.gather([1, 2, 3]) == {1: ["x"], 2: [], 3: ["y", "z"]} and not failed


def test_a_task_error_ends_the_job_with_the_workers_traceback_and_results_carry_peak_memory():
    room, _ = mailroom({1: FakeLink(1, replies=[Result(7, [], 120.0), Result(8, [], 90.0)])})
    room.drain(1)
    assert room.peak_rss_mb == {1: 120.0}  # the highest, not the last
    room.links[1].replies.append(TaskError(9, "Traceback: boom", "hostb", 4242))
    with pytest.raises(WorkerError) as err:
        room.drain(1)
    assert "boom" in str(err.value) and "4242" in str(err.value)


def test_forget_drops_the_link_its_bell_and_its_kept_replies():
    room, _ = mailroom({1: FakeLink(1), 2: FakeLink(2)}, FakeBell())
    room.note_bell(1, "bell-1")
    room.stash[1] = ["late"]
    room.forget(1)
    assert 1 not in room.links and 1 not in room.bells and 1 not in room.stash and 2 in room.links
    room.forget(1)  # twice is harmless (a duplicate failure report)


def test_a_renamed_process_keeps_its_link_and_bell_under_its_new_id_and_is_rung_there():
    bell = FakeBell()
    room, _ = mailroom({2: FakeLink(2), 4: FakeLink(4)}, bell)
    spare_link = room.links[4]
    room.note_bell(4, "bell-4")
    room.stash[4] = ["stale"]
    room.rename(4, 1)  # the spare 4 adopts place 1
    assert room.links[1] is spare_link and 4 not in room.links and 4 not in room.stash
    assert room.bells == {1: "bell-4"}
    assert room.post(1, "setup") is True and bell.rung == [["bell-4"]]


def test_announce_rings_the_workers_with_bells_at_once_and_stops_ringing_an_unreachable_one():
    bell = FakeBell(unreachable={"bell-3"})
    room, _ = mailroom({1: FakeLink(1), 2: FakeLink(2), 3: FakeLink(3)}, bell)
    room.note_bell(1, "bell-1")
    room.note_bell(3, "bell-3")
    room.note_bell(2, "")  # no bell: polled
    room.announce([1, 2, 3])
    assert bell.rung == [["bell-1", "bell-3"]]
    assert room.bells == {1: "bell-1"}  # 3 is polled from now on


def test_a_wait_ends_on_a_ring_only_when_every_worker_rings_and_no_send_is_pending():
    room, _ = mailroom({1: FakeLink(1), 2: FakeLink(2, pending_sends=1)}, FakeBell())
    assert room.rung() is False  # nobody has a bell yet
    room.note_bell(1, "b1")
    room.note_bell(2, "b2")
    assert room.rung() is False  # a large send still needs polling
    room.links[2].sends = []
    assert room.rung() is True
    no_bell, _ = mailroom({1: FakeLink(1)})
    no_bell.note_bell(1, "b1")
    assert no_bell.rung() is False  # the driver has no bell of its own


def test_wait_runs_steps_until_one_says_done_and_sleeps_between_idle_ones():
    room, _ = mailroom({})
    answers = [False, True, False, None, True]
    calls: list = []

    def step():
        calls.append(1)
        return answers[len(calls) - 1]

    room.wait(step)
    assert len(calls) == 4


def test_sent_says_done_pending_or_failed():
    room, failed = mailroom(
        {1: FakeLink(1), 2: FakeLink(2, pending_sends=1), 3: FakeLink(3, dead=True)}
    )
    assert (
        room.sent(1) is True
        and room.sent(2) is False
        and room.sent(3) is None
        and room.sent(4) is None
    )
    assert [w for w, _ in failed] == [3]


def test_a_matched_message_that_never_arrives_whole_fails_its_peer_instead_of_blocking():
    """transport.receive: a large message whose sender died while sending it never completes
    (MPICH); a blocking receive stopped the thread for good. Now its peer is failed."""
    import time

    import pytest as _pytest

    from mixle_mpi.runtime.transport import PeerFailed, receive

    class Request:
        def __init__(self, after):
            self.after, self.tests = after, 0

        def test(self):
            self.tests += 1
            return (self.tests > self.after, "payload" if self.tests > self.after else None)

    class Message:
        def __init__(self, after):
            self.req = Request(after)

        def irecv(self):
            return self.req

    assert receive(Message(0)) == "payload"  # a whole message: at once
    assert receive(Message(3), within=5.0) == "payload"  # arriving: waited for
    t0 = time.monotonic()
    with _pytest.raises(PeerFailed, match="did not arrive whole within 0.2 s"):
        receive(Message(10**9), within=0.2)
    assert time.monotonic() - t0 < 2.0
