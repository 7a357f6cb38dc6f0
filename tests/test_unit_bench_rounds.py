"""The per-round figures of ``bench/_job.py`` (issue 15's "beyond compute" target) on made-up
timings: which rank's compute is subtracted, where a round starts, and mixle's counterpart."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench._job import mixle_calls_beyond_compute, round_start, rounds_beyond_compute  # noqa: E402

MS = 1e-3


def ev(label, start_ms, end_ms, rank):
    """A timing line as the instrumented ranks write it: label, end, seconds, rank."""
    return (label, end_ms * MS, (end_ms - start_ms) * MS, rank)


def test_a_round_less_its_slowest_process_compute_and_how_it_started():
    stamps = [0.0, 100 * MS]  # iteration 2 starts at 0
    rounds = [
        (10 * MS, 20 * MS, True),
        (-5 * MS, -1 * MS, True),
    ]  # the second is iteration 1: left out
    wev = [
        ev("worker_estep", 10.2, 15.2, 0),
        ev("worker_llsum", 15.2, 17.2, 0),  # the driver: 7 ms
        ev("worker_recv", 9.0, 10.5, 1),
        ev("worker_body", 10.5, 10.8, 1),
        ev("worker_estep", 10.9, 16.9, 1),
        ev("worker_llsum", 16.9, 18.9, 1),  # the worker: 8 ms
        ev("worker_estep", 30.0, 31.0, 1),
    ]  # another round's
    announces = [("announce", 10.1 * MS, 0.1 * MS)]
    (r,) = rounds_beyond_compute(wev, rounds, stamps, announces)
    assert r["beyond"] == pytest.approx(2 * MS)  # 10 ms round - the worker's 8 ms
    assert r["slowest"] == 1 and r["scored"] is True
    assert r["rung"] == pytest.approx(0.1 * MS)
    assert r["received"] == pytest.approx(0.5 * MS)
    assert r["model"] == pytest.approx(0.8 * MS)
    assert r["computing"] == pytest.approx(0.9 * MS)  # the worker's, not the driver's 0.2
    s = round_start([r])
    assert s["rounds_worker_slowest"] == 1 and s["rounds_driver_slowest"] == 0
    assert s["beyond_where_worker_slowest"] == pytest.approx(2 * MS)
    assert s["beyond_where_driver_slowest"] is None


def test_mixle_calls_less_their_slowest_rank_and_the_m_step():
    stamps = [0.0]
    calls = [("estep_call", 20 * MS, 10 * MS), ("llsum_call", 25 * MS, 3 * MS)]
    computes = [("local_estep", 16 * MS, 5 * MS, 0), ("local_estep", 17 * MS, 6 * MS, 1)]
    msteps = [("mstep", 19 * MS, 1 * MS)]
    assert mixle_calls_beyond_compute(calls, computes, msteps, stamps) == [pytest.approx(3 * MS)]
