"""Membership and the failure policy: respawn below max_retries, blacklist at it."""

from __future__ import annotations

import pytest

from mixle_mpi.policy.membership import BLACKLISTED, DEAD, LIVE, FailureDecision, Membership


def test_initial_state_all_live():
    m = Membership([3, 1, 2], max_retries=2)
    assert m.live() == [1, 2, 3]
    assert m.blacklisted() == []
    assert m.failures() == {1: 0, 2: 0, 3: 0}
    assert all(m.is_live(w) for w in (1, 2, 3))
    assert not m.is_live(4)  # unknown place
    assert all(r.incarnation == 0 and r.state == LIVE for r in m.records.values())


def test_worker_ids_are_coerced_to_int():
    import numpy as np

    m = Membership(np.arange(1, 4), max_retries="2")
    assert m.max_retries == 2
    assert list(m.records) == [1, 2, 3] and all(type(w) is int for w in m.records)


def test_mark_failed_once_per_live_place():
    m = Membership([1, 2, 3], max_retries=2)
    assert m.mark_failed(2) is True
    assert m.records[2].state == DEAD
    assert m.failures() == {1: 0, 2: 1, 3: 0}
    assert m.mark_failed(2) is False  # duplicate report of the same death
    assert m.failures()[2] == 1
    assert m.live() == [1, 3]
    assert not m.is_live(2)


def test_mark_failed_on_blacklisted_is_duplicate():
    m = Membership([1, 2], max_retries=1)
    m.mark_failed(1)
    m.blacklist(1)
    assert m.mark_failed(1) is False
    assert m.records[1].state == BLACKLISTED
    assert m.failures()[1] == 1


def test_mark_failed_unknown_place_raises():
    m = Membership([1, 2], max_retries=1)
    with pytest.raises(KeyError):
        m.mark_failed(5)


def test_decide_respawns_below_max_retries():
    m = Membership([1, 2, 3], max_retries=2)
    m.mark_failed(3)
    m.mark_failed(1)
    d = m.decide({3, 1}, can_respawn=True)
    assert isinstance(d, FailureDecision)
    assert d.respawn == [1, 3]  # id order
    assert d.blacklist == []


def test_decide_blacklists_at_max_retries():
    m = Membership([1, 2], max_retries=2)
    m.mark_failed(1)
    m.revive(1)
    m.mark_failed(1)  # second failure == max_retries
    m.mark_failed(2)  # first failure
    d = m.decide([1, 2], can_respawn=True)
    assert d.respawn == [2]
    assert d.blacklist == [1]


def test_decide_does_not_change_state_by_itself():
    m = Membership([1], max_retries=1)
    m.mark_failed(1)
    d = m.decide([1], can_respawn=True)
    assert d.blacklist == [1]
    assert m.records[1].state == DEAD
    assert m.blacklisted() == []
    m.blacklist(1)
    assert m.blacklisted() == [1]
    assert m.live() == []


def test_decide_cannot_respawn_blacklists_everyone():
    m = Membership([1, 2, 3], max_retries=5)
    m.mark_failed(2)
    m.mark_failed(3)
    d = m.decide([3, 2], can_respawn=False)
    assert d.respawn == []
    assert d.blacklist == [2, 3]


def test_decide_skips_places_that_are_not_dead():
    m = Membership([1, 2, 3], max_retries=2)
    m.mark_failed(2)
    m.mark_failed(3)
    m.blacklist(3)
    d = m.decide([1, 2, 3], can_respawn=True)  # 1 is live, 3 already blacklisted
    assert d.respawn == [2]
    assert d.blacklist == []


def test_decide_empty():
    m = Membership([1, 2], max_retries=2)
    d = m.decide([], can_respawn=True)
    assert d.respawn == [] and d.blacklist == []


def test_revive_increments_incarnation_and_makes_live():
    m = Membership([1, 2], max_retries=3)
    m.mark_failed(2)
    assert m.revive(2, pid=4242, host="node7") == 1
    rec = m.records[2]
    assert rec.state == LIVE and rec.pid == 4242 and rec.host == "node7"
    assert m.is_live(2) and m.live() == [1, 2]
    assert rec.failures == 1  # failures are kept across incarnations
    m.mark_failed(2)
    assert m.revive(2) == 2
    assert rec.pid is None and rec.host is None
    assert m.failures() == {1: 0, 2: 2}


def test_failure_decision_defaults_are_independent():
    a, b = FailureDecision(), FailureDecision()
    a.respawn.append(1)
    assert b.respawn == []


@pytest.mark.parametrize("max_retries", [1, 2, 3])
def test_repeated_failures_until_blacklisted(max_retries):
    m = Membership([1, 2, 3], max_retries=max_retries)
    incarnations = []
    for attempt in range(1, max_retries + 1):
        assert m.mark_failed(2) is True
        assert m.mark_failed(2) is False  # the duplicate report in the same round
        d = m.decide([2], can_respawn=True)
        if attempt < max_retries:
            assert d.respawn == [2] and d.blacklist == [], attempt
            incarnations.append(m.revive(2, pid=1000 + attempt))
            assert m.is_live(2)
        else:
            assert d.respawn == [] and d.blacklist == [2], attempt
            m.blacklist(2)
    assert incarnations == list(range(1, max_retries))
    assert m.blacklisted() == [2]
    assert m.live() == [1, 3]
    assert m.failures() == {1: 0, 2: max_retries, 3: 0}
    assert m.mark_failed(2) is False  # a blacklisted place never fails again
    assert m.decide([2], can_respawn=True).respawn == []


def test_failures_is_id_ordered():
    m = Membership([5, 1, 3], max_retries=2)
    m.mark_failed(5)
    assert list(m.failures()) == [1, 3, 5]
    assert m.failures() == {1: 0, 3: 0, 5: 1}


def test_a_failed_worker_on_another_host_is_fenced_by_the_lowest_live_worker_there():
    m = Membership([1, 2, 3, 4, 5], max_retries=2)
    for w, host in ((1, "b"), (2, "b"), (3, "c"), (4, "b"), (5, "c")):
        m.records[w].host = host
    m.mark_failed(2)
    assert m.fencer("b", exclude=2) == 1
    m.mark_failed(1)
    assert m.fencer("b", exclude=2) == 4  # the dead ones never fence
    m.mark_failed(4)
    assert m.fencer("b", exclude=2) is None  # nobody left on that host: it cannot be fenced
    assert m.fencer("c", exclude=3) == 5
    assert m.fencer(None, exclude=3) is None and m.fencer("", exclude=3) is None


def test_the_remote_fencer_is_chosen_by_pid_space_not_by_host_name():
    """Two containers may share a host name: a pid means something only in its pid space. A
    worker of another space on the same host name never fences; an unknown space falls back
    to the host name."""
    m = Membership([1, 2, 3, 4], max_retries=2)
    for w in (1, 2, 3, 4):
        m.records[w].host = "node"
    spaces = {1: "boot:ns-a", 2: "boot:ns-b", 3: "boot:ns-b", 4: "boot:ns-a"}
    m.mark_failed(3)
    assert m.fencer("node", 3, "boot:ns-b", spaces) == 2
    m.mark_failed(2)
    assert m.fencer("node", 3, "boot:ns-b", spaces) is None  # nobody left in its space
    assert m.fencer("node", 3, "", spaces) == 1  # its space unknown: by host name
