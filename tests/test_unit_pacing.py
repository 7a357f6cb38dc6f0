"""policy/pacing.py: fine polls only while a message is due, the old backoff everywhere else."""

import math

import pytest

from mixle_mpi.policy.pacing import (
    BELL_CAP,
    DUE_FROM,
    DUE_MARGIN,
    DUE_UNTIL,
    FINE,
    FIRST_ROUND_WINDOW,
    HIGH,
    LOW,
    NEVER,
    NEXT_TASK_WINDOW,
    Pacing,
    next_task_window,
    round_window,
)


def delays(p: Pacing, times):
    return [p.next_delay(t) for t in times]


def test_without_a_window_it_is_the_plain_exponential_backoff():
    p = Pacing(0.001, 0.004)
    assert delays(p, [0.0] * 4) == [0.001, 0.002, 0.004, 0.004]
    p.reset()
    assert p.next_delay(0.0) == 0.001


def test_inside_the_window_sleeps_are_capped_at_fine():
    p = Pacing(window=(10.0, 20.0))
    got = delays(p, [10.0 + i * 0.001 for i in range(20)])
    assert max(got) == FINE and got[0] == LOW


def test_a_sleep_before_the_window_never_runs_into_it():
    p = Pacing(window=(10.0, 20.0))
    p.delay = HIGH
    assert p.next_delay(9.9997) == pytest.approx(0.0003)
    assert p.next_delay(9.99999) == LOW  # never shorter than low: no spin


def test_after_the_window_the_cap_is_high_again():
    p = Pacing(window=(0.0, 1.0))
    got = delays(p, [2.0] * 6)
    assert got[-1] == HIGH


def test_the_first_round_of_a_kind_is_polled_finely_at_first():
    assert round_window(5.0, None) == (5.0, 5.0 + FIRST_ROUND_WINDOW)


@pytest.mark.parametrize("last", [0.002, 0.05, 3.0])
def test_replies_are_due_around_the_last_rounds_time(last):
    start, end = round_window(100.0, last)
    assert start == pytest.approx(100.0 + DUE_FROM * last)
    assert end == pytest.approx(100.0 + DUE_UNTIL * last + DUE_MARGIN)
    assert start < 100.0 + last < end


def test_a_worker_expects_its_next_task_right_after_its_reply():
    assert next_task_window(7.0) == (7.0, 7.0 + NEXT_TASK_WINDOW)
    assert NEVER == (math.inf, math.inf)


def test_fine_is_never_above_high():
    assert Pacing(0.0005, 0.0001).fine == 0.0001


def test_an_expensive_pass_is_followed_by_a_proportionally_longer_sleep():
    from mixle_mpi.policy.pacing import PASS_SLEEP_FACTOR

    p = Pacing(window=(0.0, 10.0))
    assert p.next_delay(1.0, pass_seconds=0.001) == pytest.approx(PASS_SLEEP_FACTOR * 0.001)
    assert (
        p.next_delay(1.0, pass_seconds=0.00001) <= FINE
    )  # a cheap pass (small W) keeps the fine polls


def test_a_worker_expects_its_next_task_after_about_the_last_gap():
    assert next_task_window(7.0, 0.01) == pytest.approx(
        (7.0 + DUE_FROM * 0.01, 7.0 + DUE_UNTIL * 0.01 + DUE_MARGIN)
    )


def test_with_a_doorbell_there_is_no_fine_window_and_the_cap_is_the_bells():
    """A ring ends the sleep: inside the window no fine polling, outside it up to BELL_CAP
    (what a lost ring, or a failure only MPI reports, may wait)."""
    p = Pacing(window=(0.0, 10.0), rung=True)
    got = delays(p, [1.0] * 12)
    assert got[0] == LOW and max(got) == BELL_CAP and BELL_CAP > HIGH


def test_a_rung_wait_polls_once_soon_after_progress_then_sleeps_the_cap():
    """No doubling from LOW: each needless wake takes a core from a computing worker."""
    p = Pacing(rung=True)
    assert delays(p, [1.0] * 4) == [LOW, BELL_CAP, BELL_CAP, BELL_CAP]
    p.reset()
    assert delays(p, [1.0] * 2) == [LOW, BELL_CAP]


def test_a_wait_that_stops_being_rung_polls_as_before():
    p = Pacing(window=(0.0, 10.0), rung=True)
    delays(p, [1.0] * 12)
    p.rung = False
    assert p.next_delay(1.0) == FINE  # inside the window again: fine polls
