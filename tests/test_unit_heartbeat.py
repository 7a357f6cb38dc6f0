"""HeartbeatTracker with an injected fake clock: deadlines without sleeping."""

from __future__ import annotations

import random

import pytest
from fakeclock import FakeClock

from mixle_mpi.policy.heartbeat import HeartbeatTracker


@pytest.fixture
def clock():
    return FakeClock()


def test_nothing_watched_nothing_overdue(clock):
    hb = HeartbeatTracker(1.0, clock)
    assert hb.watched == []
    clock.advance(1e6)
    assert hb.overdue() == []


def test_timeout_is_stored_as_float(clock):
    hb = HeartbeatTracker(2, clock)
    assert isinstance(hb.timeout, float) and hb.timeout == 2.0


def test_watch_starts_deadline_now(clock):
    hb = HeartbeatTracker(1.0, clock)
    hb.watch([3, 1, 2])
    assert hb.watched == [1, 2, 3]
    for w in (1, 2, 3):
        assert hb.silence(w) == 0.0
    clock.advance(0.75)
    assert hb.silence(2) == 0.75
    assert hb.overdue() == []


def test_exact_boundary_equal_is_not_overdue_greater_is(clock):
    hb = HeartbeatTracker(0.5, clock)
    hb.watch([1])
    clock.advance(0.5)
    assert hb.silence(1) == 0.5 == hb.timeout
    assert hb.overdue() == []  # silence == timeout: still in time
    clock.advance(2.0**-20)
    assert hb.silence(1) > hb.timeout
    assert hb.overdue() == [1]  # strictly longer: overdue


def test_heard_resets_deadline(clock):
    hb = HeartbeatTracker(1.0, clock)
    hb.watch([1, 2])
    clock.advance(0.75)
    hb.heard(1)
    clock.advance(0.5)  # worker 1 silent 0.5, worker 2 silent 1.25
    assert hb.silence(1) == 0.5
    assert hb.silence(2) == 1.25
    assert hb.overdue() == [2]
    hb.heard(2)
    assert hb.overdue() == []


def test_heard_on_unwatched_worker_does_nothing(clock):
    hb = HeartbeatTracker(1.0, clock)
    hb.watch([1])
    hb.heard(7)
    assert hb.watched == [1]
    with pytest.raises(KeyError):
        hb.silence(7)
    clock.advance(5.0)
    assert hb.overdue() == [1]


def test_heard_after_forget_does_not_rewatch(clock):
    hb = HeartbeatTracker(1.0, clock)
    hb.watch([1, 2])
    hb.forget(1)
    hb.heard(1)
    assert hb.watched == [2]
    clock.advance(2.0)
    assert hb.overdue() == [2]


def test_forget_stops_watching_and_is_idempotent(clock):
    hb = HeartbeatTracker(1.0, clock)
    hb.watch([1, 2, 3])
    clock.advance(2.0)
    assert hb.overdue() == [1, 2, 3]
    hb.forget(2)
    hb.forget(2)  # no error the second time
    hb.forget(99)  # never watched: no error
    assert hb.watched == [1, 3]
    assert hb.overdue() == [1, 3]


def test_rewatch_gives_fresh_grace_period(clock):
    hb = HeartbeatTracker(1.0, clock)
    hb.watch([1, 2])
    clock.advance(3.0)
    assert hb.overdue() == [1, 2]
    hb.watch([2])  # e.g. a respawned replacement holds place 2
    assert hb.silence(2) == 0.0
    assert hb.overdue() == [1]
    clock.advance(1.0)
    assert hb.overdue() == [1]  # exactly at the deadline: still fine
    clock.advance(0.25)
    assert hb.overdue() == [1, 2]


def test_rewatch_after_forget(clock):
    hb = HeartbeatTracker(1.0, clock)
    hb.watch([4])
    hb.forget(4)
    clock.advance(10.0)
    hb.watch([4])
    assert hb.overdue() == []
    assert hb.silence(4) == 0.0


def test_overdue_is_id_ordered(clock):
    hb = HeartbeatTracker(1.0, clock)
    hb.watch([9, 2, 5])
    hb.watch([1])
    clock.advance(5.0)
    assert hb.overdue() == [1, 2, 5, 9]


def test_watch_accepts_any_iterable(clock):
    hb = HeartbeatTracker(1.0, clock)
    hb.watch(range(1, 4))
    hb.watch(w for w in (7, 8))
    assert hb.watched == [1, 2, 3, 7, 8]


def test_default_clock_is_monotonic():
    import time

    assert HeartbeatTracker(1.0).clock is time.monotonic


def test_grace_extends_one_worker_then_restores():
    now = [0.0]
    t = HeartbeatTracker(1.0, clock=lambda: now[0])
    t.watch([1, 2])
    t.set_grace(1, 10.0)
    now[0] = 5.0
    assert t.overdue() == [2]
    t.set_grace(1, 0.0)  # restored, with a fresh start
    now[0] = 5.9
    assert t.overdue() == [2]
    now[0] = 6.1
    assert t.overdue() == [1, 2]
    t.forget(1)
    assert t.limit(1) == 1.0


# -- stalls: a worker that beats but whose main thread is stuck ------------------------------
from mixle_mpi.policy.heartbeat import StallTracker  # noqa: E402


def test_a_busy_worker_without_progress_is_stalled_after_the_timeout():
    clock = FakeClock(0.0)
    st = StallTracker(10.0, clock)
    st.observe(1, progress=5, busy=True)
    clock.now = 9.9
    st.observe(1, progress=5, busy=True)
    assert st.stalled() == {}
    clock.now = 10.5
    assert st.stalled() == {1: 10.5}


def test_progress_restarts_the_clock_so_a_long_healthy_task_is_never_stalled():
    clock = FakeClock(0.0)
    st = StallTracker(10.0, clock)
    for step in range(100):  # 100 sub-chunks of 9 s each: 900 s of work, never a stall
        st.observe(2, progress=step, busy=True)
        clock.now += 9.0
        assert st.stalled() == {}


def test_an_idle_worker_is_never_stalled_and_forget_drops_a_worker():
    clock = FakeClock(0.0)
    st = StallTracker(1.0, clock)
    st.observe(1, progress=0, busy=False)
    st.observe(2, progress=0, busy=True)
    clock.now = 50
    assert set(st.stalled()) == {2}
    st.observe(2, progress=0, busy=False)  # the task ended: idle from now on
    assert st.stalled() == {}
    st.observe(3, progress=1, busy=True)
    st.forget(3)
    clock.now = 100
    assert st.stalled() == {}


# -- overdue() and stalled() against the per-worker versions they replaced ------------------
def reference_overdue(tracker):
    now = tracker.clock()
    return sorted(w for w, t in tracker._last.items() if now - t > tracker.limit(w))


def reference_stalled(tracker):
    now = tracker.clock()
    return {w: now - t for w, (_, t) in sorted(tracker._seen.items()) if now - t > tracker.timeout}


def test_overdue_and_stalled_are_the_per_worker_checks_on_random_histories():
    """Property test: random timeouts (zero and negative included), graces set and
    cleared, beats, progress and forgetting over a random clock: the same answers."""
    for seed in range(1500):
        rng = random.Random(seed)
        clock = FakeClock()
        timeout = rng.choice([0.0, -1.0, 0.5, 1.0, 3.0, rng.uniform(0, 5)])
        beats, stalls = HeartbeatTracker(timeout, clock=clock), StallTracker(timeout, clock=clock)
        workers = list(range(rng.randint(1, 30)))
        beats.watch(workers)
        for _ in range(rng.randint(1, 60)):
            r, w = rng.random(), rng.choice(workers)
            if r < 0.3:
                clock.advance(rng.choice([0.0, 0.25, 0.5, rng.uniform(0, 2)]))
            elif r < 0.55:
                beats.heard(w)
                stalls.observe(w, rng.randint(0, 3), rng.random() < 0.8)
            elif r < 0.65:
                beats.set_grace(w, rng.choice([0.0, -1.0, 0.3, 2.0, 10.0]))
            elif r < 0.7:
                beats.forget(w)
                stalls.forget(w)
            elif r < 0.75:
                beats.watch([w])
            got_o, got_s = beats.overdue(), stalls.stalled()
            assert got_o == reference_overdue(beats), seed
            want_s = reference_stalled(stalls)
            assert got_s == want_s and list(got_s) == list(want_s), seed


def test_a_heartbeat_thread_stuck_past_the_limit_is_named_with_how_long():
    from mixle_mpi.policy.heartbeat import listener_stuck

    assert listener_stuck(passed_at=100.0, now=150.0, limit=90.0) is None
    assert listener_stuck(passed_at=100.0, now=190.0, limit=90.0) is None  # at the limit: not yet
    assert listener_stuck(passed_at=100.0, now=190.5, limit=90.0) == 90.5


def test_the_watchdog_ends_the_driver_when_no_heartbeat_pass_completes_and_not_before():
    """Real threads and a short limit; the ending is recorded instead of exiting."""
    import time

    from mixle_mpi.runtime.watchdog import Watchdog

    class Listener:
        passed_at = time.monotonic()

    ended: list[str] = []
    healthy, stuck = Listener(), Listener()
    dogs = [
        Watchdog(healthy, limit=0.3, check_every=0.02, end=lambda m: ended.append("healthy: " + m)),
        Watchdog(stuck, limit=0.3, check_every=0.02, end=ended.append),
    ]
    for d in dogs:
        d.start()
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        healthy.passed_at = time.monotonic()  # passes keep completing
        time.sleep(0.02)
    for d in dogs:
        d.stop()
    assert len(ended) == 1 and ended[0].startswith(
        "the driver's MPI library made no progress for"
    ), ended
    assert "run the same command again to resume" in ended[0]


def test_the_driver_answers_only_a_worker_it_heard_so_a_dead_one_is_sent_nothing_more():
    from mixle_mpi.policy.heartbeat import answer_due

    assert answer_due(1, False) and answer_due(3, False)
    assert not answer_due(
        0, False
    )  # silent (maybe dead): under MPICH each send would keep a cell for good
    assert answer_due(0, True)  # a role or a note still goes out


def test_a_quiet_driver_is_waited_for_as_long_as_it_said_beyond_the_usual_limit():
    from mixle_mpi.policy.heartbeat import driver_silence_limit

    assert driver_silence_limit(60.0, last_heard=100.0, quiet_until=0.0) == 60.0  # never told
    assert (
        driver_silence_limit(60.0, last_heard=100.0, quiet_until=160.0) == 120.0
    )  # 60 s of quiet announced
    assert (
        driver_silence_limit(60.0, last_heard=200.0, quiet_until=160.0) == 60.0
    )  # heard since: back to normal


def test_a_main_thread_is_stuck_only_when_silent_past_the_limit_and_not_computing():
    from mixle_mpi.policy.heartbeat import main_thread_stuck

    assert (
        main_thread_stuck(marked_at=100.0, now=150.0, cpu_since_mark=0.0, limit=90.0) is None
    )  # within the limit
    assert (
        main_thread_stuck(marked_at=100.0, now=200.0, cpu_since_mark=0.0, limit=90.0) == 100.0
    )  # blocked
    assert (
        main_thread_stuck(marked_at=100.0, now=200.0, cpu_since_mark=60.0, limit=90.0) is None
    )  # an M-step
    assert (
        main_thread_stuck(marked_at=100.0, now=200.0, cpu_since_mark=9.0, limit=90.0) == 100.0
    )  # 9 % of a core


def test_the_watchdog_ends_a_fit_whose_main_thread_blocks_outside_mpi_and_spares_one_that_computes():
    """Real threads: this test's own thread is the main thread. Blocked in a wait (a hung file
    system) inside a fit: ended; computing as long: spared; blocked outside a fit: spared."""
    import threading
    import time

    from mixle_mpi.core import liveness
    from mixle_mpi.runtime.watchdog import Watchdog

    class Listener:
        passed_at = float("inf")  # its heartbeat thread is fine throughout

    def run(body, armed=True) -> list[str]:
        ended: list[str] = []
        dog = Watchdog(Listener(), limit=0.5, check_every=0.05, end=ended.append)
        dog.start()
        try:
            if armed:
                with liveness.watched():
                    body()
            else:
                liveness.mark()
                body()
        finally:
            dog.stop()
        return ended

    blocked = run(lambda: threading.Event().wait(1.5))
    assert len(blocked) == 1 and blocked[0].startswith(
        "the driver's main thread made no progress for"
    ), blocked
    assert (
        "computed nothing meanwhile" in blocked[0]
        and "run the same command again to resume" in blocked[0]
    )

    def compute():
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            sum(i * i for i in range(10_000))

    assert run(compute) == []
    assert (
        run(lambda: threading.Event().wait(1.5), armed=False) == []
    )  # between fits: the caller's time


def test_a_fresh_deadline_is_not_a_hearing():
    """A suspect given one more timeout (``watch``) is cleared only by a real beat."""
    clock = FakeClock()
    t = HeartbeatTracker(1.0, clock=clock)
    t.watch([1])
    clock.advance(1.5)
    t.watch([1])  # one more timeout from now
    assert not t.heard_since(1, clock() - 0.1)
    clock.advance(0.2)
    t.heard(1)
    assert t.heard_since(1, clock() - 0.1)
    t.heard_ago(1, 0.5)  # a relay's older word never moves the hearing back
    assert t.heard_since(1, clock() - 0.1)
