"""Heartbeat fan-in as plain data: who relays for whom, what a relay reports, and how the
driver's tracker reads a relayed worker's silence (one hop late)."""

from __future__ import annotations

import pytest
from fakeclock import FakeClock

from mixle_mpi.policy.fanin_plan import DIRECT, MemberBook, Relayed, Role, plan, roles
from mixle_mpi.policy.heartbeat import HeartbeatTracker


def test_at_or_below_the_threshold_everyone_beats_to_the_driver():
    assert plan([3, 1, 2], 3) == {1: None, 2: None, 3: None}
    assert plan(range(100), 0) == {w: None for w in range(100)}  # 0: fan-in off


@pytest.mark.parametrize(
    "n,max_direct", [(17, 16), (64, 16), (1000, 16), (10_000, 16), (5, 2), (33, 32)]
)
def test_the_driver_hears_at_most_max_direct_workers_and_every_worker_is_heard(n, max_direct):
    relay_of = plan(range(n), max_direct)
    relays = [w for w, r in relay_of.items() if r is None]
    assert 1 < len(relays) <= max_direct
    assert set(relay_of) == set(range(n))
    assert all(relay_of[r] is None for r in relays)  # no relay is relayed
    assert all(r in relays for r in relay_of.values() if r is not None)  # one level only
    size = -(-n // max_direct)
    sizes = [1 + sum(1 for r in relay_of.values() if r == x) for x in sorted(relays)]
    assert all(s == size for s in sizes[:-1]) and 1 <= sizes[-1] <= size


def test_groups_are_consecutive_ids_led_by_their_lowest():
    assert plan([5, 1, 4, 2, 3], 2) == {1: None, 2: 1, 3: 1, 4: None, 5: 4}


def test_roles_carry_ranks_on_the_shared_communicator():
    relay_of = plan([1, 2, 3, 4, 5], 2)
    rank = {w: w + 10 for w in relay_of}
    got = roles(relay_of, rank)
    assert got[1] == Role(None, ((2, 12), (3, 13)))
    assert got[2] == Role(11, ()) and got[3] == Role(11, ())
    assert got[4] == Role(None, ((5, 15),))
    assert got[5] == Role(14, ())
    assert roles(plan([1, 2], 2), {1: 1, 2: 2}) == {1: DIRECT, 2: DIRECT}


def test_a_relay_reports_each_members_age_and_state():
    clock = FakeClock()
    book = MemberBook(clock)
    book.assign([(7, 3), (9, 4)])
    clock.advance(0.25)
    book.heard(3, progress=11, busy=True)
    book.heard(99, progress=1, busy=True)  # not a member: ignored
    clock.advance(0.5)
    assert book.report() == (Relayed(7, 0.5, 11, True, ""), Relayed(9, 0.75, 0, False, ""))


def test_a_member_the_relays_mpi_saw_fail_is_reported_with_its_cause():
    clock = FakeClock()
    book = MemberBook(clock)
    book.assign([(7, 3)])
    book.failed(3, "MPI error class 75")
    book.failed(3, "a later error")  # the first cause stays
    assert book.report()[0].cause == "MPI error class 75"


def test_reassigning_keeps_records_of_kept_members_and_starts_new_ones_fresh():
    clock = FakeClock()
    book = MemberBook(clock)
    book.assign([(7, 3), (9, 4)])
    book.failed(4, "dead")
    clock.advance(1.0)
    book.assign([(7, 3), (8, 4)])  # rank 4 is another worker now (after a respawn)
    ages = {line.worker: line for line in book.report()}
    assert ages[7].age == 1.0 and ages[8].age == 0.0 and ages[8].cause == ""
    book.assign([])
    assert book.report() == ()


def test_a_relayed_worker_gets_one_hop_more_and_relayed_news_never_moves_time_back():
    clock = FakeClock()
    hb = HeartbeatTracker(1.0, clock)
    hb.watch([1, 2])
    hb.set_hop(2, 0.5)
    assert hb.limit(1) == 1.0 and hb.limit(2) == 1.5
    clock.advance(1.25)
    assert hb.overdue() == [1]
    hb.heard_ago(2, 0.25)
    assert hb.silence(2) == 0.25
    hb.heard_ago(2, 5.0)  # older news than what is known: no change
    assert hb.silence(2) == 0.25
    clock.advance(1.5)
    assert hb.overdue() == [1, 2]
    hb.set_hop(2, 0)
    hb.forget(1)
    assert hb.limit(2) == 1.0 and hb.watched == [2]


def test_a_member_is_not_named_silent_while_its_relay_is_silent_too():
    from mixle_mpi.policy.fanin_plan import named_silent

    via = {2: 1, 3: 1, 5: 4}
    assert named_silent([1, 2, 3], via, suspects=[]) == [1]  # the relay stopped: only it
    assert named_silent([2, 3], via, suspects=[1]) == []  # its members wait for new roles
    assert named_silent([2, 5], via, suspects=[]) == [2, 5]  # relays beating: members are silent
    assert named_silent([6, 1], via, suspects=[6]) == [1]  # named once
