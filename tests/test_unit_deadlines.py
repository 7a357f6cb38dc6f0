"""Bounding a blocking call (core/deadlines.py): its value, its error, its deadline, and the
caller giving up early once it knows the call can never end (a Spawn whose process died)."""

from __future__ import annotations

import threading
import time

import pytest

from mixle_mpi.core.deadlines import GaveUp, run_with_deadline


def test_the_value_and_the_error_come_back_to_the_caller():
    assert run_with_deadline(lambda: 7, 5.0, "sum") == 7
    with pytest.raises(ValueError, match="bad"):
        run_with_deadline(lambda: (_ for _ in ()).throw(ValueError("bad")), 5.0, "sum")
    assert run_with_deadline(lambda: 8, 5.0, "sum", give_up=lambda: None) == 8


def test_a_call_past_its_deadline_is_abandoned_with_a_timeout():
    release = threading.Event()
    with pytest.raises(TimeoutError, match="spawn did not finish within 0.2 s") as info:
        run_with_deadline(lambda: release.wait(30), 0.2, "spawn")
    assert not isinstance(info.value, GaveUp)
    release.set()


def test_the_caller_gives_up_as_soon_as_it_is_told_the_call_cannot_end():
    release, asked = threading.Event(), []

    def give_up():
        asked.append(time.monotonic())
        return "its process (pid 12) died before it had joined MPI" if len(asked) >= 3 else None

    t0 = time.monotonic()
    with pytest.raises(GaveUp, match=r"spawn given up: its process \(pid 12\) died"):
        run_with_deadline(lambda: release.wait(30), 60.0, "spawn", give_up=give_up)
    assert len(asked) == 3 and time.monotonic() - t0 < 30  # long before the deadline
    release.set()
