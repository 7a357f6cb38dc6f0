"""runtime/doorbell.py: a ring ends a wait at once; no ring, the wait times out; ringing a
bell that is gone is harmless (a ring is a hint, never needed for correctness)."""

import threading
import time

import pytest

from mixle_mpi.runtime.doorbell import Doorbell, own

pytestmark = pytest.mark.skipif(
    own() is None, reason="no abstract-namespace sockets on this platform"
)


def test_a_ring_ends_the_wait_long_before_its_timeout():
    bell, other = Doorbell(), Doorbell()
    threading.Timer(0.05, other.ring, args=(bell.address,)).start()
    t0 = time.monotonic()
    assert bell.wait(10.0)
    assert time.monotonic() - t0 < 5.0
    bell.close(), other.close()


def test_without_a_ring_the_wait_times_out():
    bell = Doorbell()
    t0 = time.monotonic()
    assert not bell.wait(0.05)
    assert time.monotonic() - t0 >= 0.04
    bell.close()


def test_rings_before_the_wait_are_kept_and_consumed_together():
    bell, other = Doorbell(), Doorbell()
    for _ in range(3):
        other.ring(bell.address)
    assert bell.wait(1.0)
    assert not bell.wait(0.01)  # all three consumed by the first wait
    bell.close(), other.close()


def test_ringing_a_gone_bell_is_harmless_and_says_so():
    bell, gone = Doorbell(), Doorbell()
    address = gone.address
    assert bell.ring(address)
    gone.close()
    assert not bell.ring(address)  # no error: the ringer polls that peer from now on
    assert not bell.ring("mixle-mpi-bell-no-such")
    bell.close()


def test_a_full_queue_still_counts_as_rung():
    bell, other = Doorbell(), Doorbell()
    assert all(other.ring(bell.address) for _ in range(1000))  # far beyond the queue's length
    assert bell.wait(1.0)
    bell.close(), other.close()


def test_one_bell_per_process():
    assert own() is own()


def test_ring_all_rings_every_bell_in_one_call_and_says_which_are_gone():
    bells, ringer, gone = [Doorbell() for _ in range(3)], Doorbell(), Doorbell()
    address = gone.address
    gone.close()
    addresses = [
        bells[0].address,
        address,
        bells[1].address,
        "mixle-mpi-bell-no-such",
        bells[2].address,
    ]
    for _ in range(2):  # the second time from the message array built the first time
        assert ringer.ring_all(addresses) == [True, False, True, False, True]
        assert all(b.wait(1.0) for b in bells)
    assert ringer.ring_all([]) == [] and ringer.ring_all([bells[0].address]) == [True]
    for b in (*bells, ringer):
        b.close()


def test_ring_all_counts_a_full_queue_as_rung():
    bell, other, ringer = Doorbell(), Doorbell(), Doorbell()
    for _ in range(1000):
        assert ringer.ring_all([bell.address, other.address]) == [True, True]
    assert bell.wait(1.0) and other.wait(1.0)
    for b in (bell, other, ringer):
        b.close()
