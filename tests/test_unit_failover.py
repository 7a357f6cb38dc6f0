"""Driver failover's decisions (pure): when it runs, who drives next, which losses it follows;
and what the logs and the summary say about a takeover."""

from __future__ import annotations

import pytest

from mixle_mpi.cli.fitcmd import done_line
from mixle_mpi.policy.failover import failover_status, successor, takes_over_on
from mixle_mpi.policy.reconfig import EMULATED, KEEP, ULFM
from mixle_mpi.storage.events import describe


def test_failover_runs_only_when_asked_and_under_ulfm():
    assert failover_status(False, ULFM) == (False, "off")
    on, why = failover_status(True, ULFM)
    assert on and why.startswith("on: ") and "lowest surviving rank" in why
    for method in (EMULATED, KEEP):
        on, why = failover_status(True, method)
        assert not on and why.startswith("off: needs ULFM") and "rerun it to resume" in why


def test_the_lowest_survivor_drives_whatever_the_order():
    assert successor([3, 1, 2]) == 1
    assert successor(range(4)) == 0
    with pytest.raises(ValueError):
        successor([])


def test_only_a_driver_known_dead_is_followed():
    assert takes_over_on("failed") and takes_over_on("gone")
    assert not takes_over_on("silent")  # stopped or cut off: it may still write; never two drivers
    with pytest.raises(ValueError):
        takes_over_on("maybe")


def test_the_log_says_who_died_and_who_drives():
    failed = {"event": "driver_failed", "host": "n1", "pid": 41, "cause": "lost the driver (MPI error class 75)",
              "seen_at": 1.0, "seen_by": 2}
    assert describe(failed) == "the driver (pid 41 on n1) died: rank 2 saw it (lost the driver (MPI error class 75))"
    elected = {"event": "driver_elected", "rank": 1, "pid": 42, "host": "n1", "survivors": 3, "agreed_seconds": 0.002}
    assert describe(elected) == "rank 1 (pid 42 on n1) drives now, over 3 surviving rank(s), agreed in 0.002 s"
    cont = {"event": "continuation", "method": "ulfm", "reason": "r", "respawn": "on", "failover": "off"}
    assert "failover" not in describe(cont)
    assert describe({**cont, "failover": "on: x"}).endswith("; driver failover on: x")


def test_the_done_line_counts_takeovers():
    summary = {"iterations": 5, "stopped": "max_its", "final_ll": -1.5, "failures_survived": 0,
               "wall_seconds": 2.0, "wall_seconds_total": 2.0, "segments": 1, "driver_takeovers": 1}
    assert "failures survived 0 (and the driver's death 1 time(s): a survivor took over)," in done_line(summary, "m")
    assert "took over" not in done_line({**summary, "driver_takeovers": 0}, "m")
