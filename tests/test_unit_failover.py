"""Driver failover's decisions (pure): when it runs, who drives next, which losses it follows;
and what the logs and the summary say about a takeover."""

from __future__ import annotations

import pytest

from mixle_mpi.cli.fitcmd import done_line
from mixle_mpi.policy.failover_plan import (
    BY_KEEPING,
    BY_MESSAGES,
    BY_SHRINK,
    OFF,
    Election,
    agrees_by_messages,
    can_take_over,
    election_window,
    failover_status,
    successor,
    takes_over_on,
)
from mixle_mpi.policy.reconfig_plan import EMULATED, KEEP, ULFM
from mixle_mpi.storage.events import describe


def test_how_survivors_agree_follows_how_the_job_continues():
    assert failover_status(False, ULFM) == (OFF, "off")
    how, why = failover_status(True, ULFM)
    assert how == BY_SHRINK and why.startswith("on: ") and "ULFM's Shrink" in why
    how, why = failover_status(True, EMULATED)
    assert how == BY_MESSAGES and "by messages" in why and "share the driver's host" in why
    how, why = failover_status(
        True, KEEP
    )  # srun with Open MPI: the dead driver stays in the communicator
    assert how == BY_KEEPING and "by messages, over the job's own communicator" in why
    assert failover_status(True, "other")[0] == OFF
    assert [agrees_by_messages(h) for h in (BY_SHRINK, BY_MESSAGES, BY_KEEPING)] == [
        False,
        True,
        True,
    ]


def test_a_worker_that_cannot_read_the_store_drops_out_of_failover():
    assert can_take_over("/shared/run/shards.h5", True) == ""
    why = can_take_over("/local/run/shards.h5", False)
    assert (
        why.startswith("cannot read the shard store /local/run/shards.h5")
        and "every rank reads" in why
    )
    assert can_take_over("", False) == ""  # failover off: nothing to check
    why = can_take_over("/local/run", False, "the checkpoint's folder")
    assert (
        why
        == "cannot read the checkpoint's folder /local/run (put it on a file system every rank reads)"
    )


def test_the_lowest_survivor_drives_whatever_the_order():
    assert successor([3, 1, 2]) == 1
    assert successor(range(4)) == 0
    with pytest.raises(ValueError):
        successor([])


def test_only_a_driver_known_dead_is_followed():
    assert takes_over_on("failed") and takes_over_on("gone") and takes_over_on("told")
    assert not takes_over_on("silent")  # stopped or cut off: it may still write; never two drivers
    with pytest.raises(ValueError):
        takes_over_on("maybe")


def test_the_election_waits_for_everyone_or_its_window():
    e = Election(2, frozenset({1, 2, 3, 4}), started=0.0, window=2.0)
    assert e.decide(0.5) is None  # nobody else heard yet
    e.hear(3)
    e.hear(1)
    e.hear(7)  # not a worker of this communicator: ignored
    assert e.alive() == {1, 2, 3} and e.decide(1.0) is None
    assert e.decide(2.0) == ("follow", 1)  # the window passed: rank 1 names the survivors
    e.hear(4)
    assert e.decide(1.0) == ("follow", 1)  # everyone answered: no need to wait
    lead = Election(1, frozenset({1, 2, 3}), started=0.0, window=2.0, heard={3})
    assert lead.decide(2.5) == ("lead", (1, 3))


def test_no_majority_no_driver():
    """Two groups that cannot hear each other: at most one has a majority, so at most one
    drives; an even split gives none (both end, and a rerun resumes)."""
    left = Election(1, frozenset({1, 2, 3, 4}), 0.0, 1.0, heard={2})
    right = Election(3, frozenset({1, 2, 3, 4}), 0.0, 1.0, heard={4})
    assert left.decide(1.0)[0] == right.decide(1.0)[0] == "give_up"
    assert "no majority" in left.decide(1.0)[1]
    big = Election(1, frozenset({1, 2, 3, 4, 5}), 0.0, 1.0, heard={2, 3})
    small = Election(4, frozenset({1, 2, 3, 4, 5}), 0.0, 1.0, heard={5})
    assert big.decide(1.0) == ("lead", (1, 2, 3)) and small.decide(1.0)[0] == "give_up"


def test_a_survivor_builds_only_a_communicator_it_may_join():
    e = Election(3, frozenset({1, 2, 3, 4}), 0.0, 1.0, heard={2, 4})
    assert e.accepts(2, (2, 3, 4))
    assert not e.accepts(2, (2, 4))  # without this rank
    assert not e.accepts(4, (2, 3, 4))  # not from its lowest member
    assert not e.accepts(1, (1, 3))  # no majority
    e.hear(1)
    assert not e.accepts(2, (2, 3, 4))  # rank 1 lives and leads: wait for its word
    assert e.accepts(1, (1, 2, 3, 4))


def test_the_window_covers_a_few_beats():
    assert election_window(0.4) == pytest.approx(2.4)
    assert election_window(0.05) == 1.0


def test_the_log_says_who_died_and_who_drives():
    failed = {
        "event": "driver_failed",
        "host": "n1",
        "pid": 41,
        "cause": "lost the driver (MPI error class 75)",
        "seen_at": 1.0,
        "seen_by": 2,
    }
    assert (
        describe(failed)
        == "the driver (pid 41 on n1) died: rank 2 saw it (lost the driver (MPI error class 75))"
    )
    elected = {
        "event": "driver_elected",
        "rank": 1,
        "pid": 42,
        "host": "n1",
        "survivors": 3,
        "agreed_seconds": 0.002,
    }
    assert (
        describe(elected)
        == "rank 1 (pid 42 on n1) drives now, over 3 surviving rank(s), agreed in 0.002 s"
    )
    cont = {
        "event": "continuation",
        "method": "ulfm",
        "reason": "r",
        "respawn": "on",
        "failover": "off",
    }
    assert "failover" not in describe(cont)
    assert describe({**cont, "failover": "on: x"}).endswith("; driver failover on: x")


def test_the_done_line_counts_takeovers():
    summary = {
        "iterations": 5,
        "stopped": "max_its",
        "final_ll": -1.5,
        "failures_survived": 0,
        "wall_seconds": 2.0,
        "wall_seconds_total": 2.0,
        "segments": 1,
        "driver_takeovers": 1,
    }
    summary["failures_survived"] = 1
    assert (
        "failures survived 1 (the driver's death once among them: a survivor took over),"
        in done_line(summary, "m")
    )
    assert "took over" not in done_line({**summary, "driver_takeovers": 0}, "m")
