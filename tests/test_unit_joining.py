"""A replacement joining in the background: its steps, and who computes its shards meanwhile."""

from __future__ import annotations

from mixle_mpi.policy.join_plan import Join, release_plan, work_of


def test_a_replacement_joins_once_ready_and_every_block_is_loaded():
    j = Join(2, started=10.0)
    assert not j.joined() and not j.stalled(15.0, 60) and j.stalled(71.0, 60)
    j.got_ready([(1, 0, 5, False), (1, 5, 9, True), (4, 0, 3, True)], now=12.0)
    assert not j.joined()
    assert j.next_part(13.0) == (1, 0, 5, False) and j.loading == set()
    assert j.next_part(14.0) == (1, 5, 9, True) and j.loading == {1}
    j.got_loaded(1, 15.0)
    assert j.next_part(16.0) == (4, 0, 3, True) and not j.joined()
    assert j.stalled(77.0, 60) and not j.stalled(75.0, 60)  # measured from its last step
    j.got_loaded(4, 17.0)
    assert j.joined()
    assert not j.stalled(1000.0, 60)  # it awaits the round boundary, however long the round


def test_a_replacement_of_a_place_without_shards_joins_when_ready():
    j = Join(5, started=0.0)
    j.got_ready([], now=1.0)
    assert j.joined()


def test_survivors_compute_the_shards_they_keep_for_a_place_that_is_joining():
    owners = {1: [0, 3], 2: [1, 4], 3: [2, 5]}
    kept = {1: 3, 4: 1}  # place 2 died; its shards were recomputed (and kept) by 3 and 1
    assert work_of(owners, kept, [1, 3]) == {1: [0, 3, 4], 3: [1, 2, 5]}
    # place 2 is back: it computes its own shards; the copies are ignored until released
    assert work_of(owners, kept, [1, 2, 3]) == {1: [0, 3], 2: [1, 4], 3: [2, 5]}
    # a shard kept by a worker that is not live is nobody's work: it is an orphan again
    assert work_of(owners, kept, [3]) == {3: [1, 2, 5]}


def test_release_tells_each_holder_its_copies():
    kept = {1: 3, 4: 1, 7: 3}
    assert release_plan(kept, [4, 1, 7, 9]) == {1: [4], 3: [1, 7]}
    assert release_plan(kept, []) == {}


def test_a_background_call_is_polled_and_gives_its_value_or_its_error():
    import threading

    from mixle_mpi.core.deadlines import Background

    gate = threading.Event()
    call = Background(lambda: gate.wait(5) and 42, "test")
    assert not call.done()
    gate.set()
    call.thread.join(5)
    assert call.done() and call.result() == 42
    failing = Background(lambda: 1 / 0, "test")
    failing.thread.join(5)
    try:
        failing.result()
    except ZeroDivisionError:
        pass
    else:
        raise AssertionError("the call's error was not raised in the caller")
