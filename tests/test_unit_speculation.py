"""The speculation plan: who is a straggler, how many of its shards to copy, onto whom (pure)."""

from __future__ import annotations

import random

from mixle_mpi.policy.speculation_plan import (
    COPY_COST,
    MIN_SAVING,
    MULTIPLIER,
    Busy,
    Paces,
    busy_workers,
    how_many,
    is_straggler,
    plan_copies,
)


def test_paces_are_the_median_of_the_last_shards_per_kind_and_place_and_forget_a_new_process():
    p = Paces(window=3)
    for s in (1.0, 1.0, 9.0):  # one shard the scheduler delayed: no straggler
        p.note("estep", 1, s)
    assert p.of("estep", 1) == 1.0
    for s in (4.0, 4.0):  # two more slow ones: its pace follows
        p.note("estep", 1, s)
    assert p.of("estep", 1) == 4.0
    p.note("llsum", 1, 10.0)
    p.note("estep", 2, 2.0)
    assert p.of("llsum", 1) == 10.0
    assert p.typical("estep", [1, 2, 3]) == 3.0 and p.typical("estep", [3]) is None
    p.forget(1)
    assert p.of("estep", 1) is None and p.of("llsum", 1) is None and p.of("estep", 2) == 2.0


def test_a_worker_is_a_straggler_by_its_shards_pace_or_by_a_lag_this_round_past_min_lag():
    assert is_straggler(Busy(1, (4, 5), 2, 0, 0.0, 0.4), typical=0.1)  # its shards are slow
    assert not is_straggler(Busy(1, (4, 5), 2, 0, 0.0, 0.14), typical=0.1)  # within the multiplier
    assert is_straggler(Busy(1, (4, 5), 2, 1, 0.8, None), typical=0.1)  # this round: 0.4 s a shard
    assert is_straggler(Busy(1, (4, 5), 2, 1, 0.8, 0.1), typical=0.1)  # slow between its shards
    assert not is_straggler(
        Busy(1, (4, 5), 2, 0, 0.05, 0.01), typical=0.01
    )  # a scheduler's delay: < MIN_LAG
    assert not is_straggler(
        Busy(1, (4, 5), 2, 4, 0.12, 0.01), typical=0.009
    )  # a shared core: 0.075 s behind
    assert not is_straggler(Busy(1, (), 0, 3, 5.0, 1.0), typical=0.1)  # nothing left
    assert (
        abs(Busy(1, (4, 5), 2, 1, 0.8, 0.1).remaining() - 0.4) < 1e-12
    )  # but this round's delay counts


def test_how_many_makes_both_ends_meet_and_copies_nothing_that_saves_less_than_a_shard():
    slow = Busy(1, (0, 1, 2, 3), 4, 0, 0.0, 0.4)  # four shards left at 4x the typical pace
    k = how_many(slow, helpers=2, typical=0.1)
    assert k == 4  # it has not started: the helpers take all 4 (2 shards each: 0.25 s, not 1.6 s)
    started = Busy(1, (0, 1, 2, 3), 4, 0, 0.3, 0.4)  # 0.3 s into its first shard: it keeps that one
    assert how_many(started, helpers=2, typical=0.1) == 3
    assert how_many(slow, helpers=0, typical=0.1) == 0
    barely = Busy(
        1, (0,), 1, 0, 0.0, 0.16
    )  # one shard at 1.6x: a copy saves less than a typical shard
    assert how_many(barely, helpers=3, typical=0.1) == 0


def test_plan_copies_takes_the_tail_of_the_slowest_first_and_spreads_it_over_the_idle():
    typical = 0.1
    busy = [Busy(1, (0, 1, 2, 3, 4, 5), 6, 0, 0.05, 0.4), Busy(2, (6, 7), 2, 4, 0.4, 0.1)]
    copies = plan_copies(busy, idle=[3, 4], typical=typical)
    assert set(copies.projected) == {1}
    got = sorted(s for ss in copies.plan.values() for s in ss)
    assert got == list(range(6 - len(got), 6)) and len(got) >= 3  # the tail of worker 1's queue
    assert copies.plan[3][0] == 5  # the last shard first
    assert plan_copies(busy, idle=[], typical=typical).plan == {}
    assert plan_copies(busy, idle=[3], typical=None).plan == {}


def test_every_plan_copies_only_outstanding_uncopied_shards_onto_idle_workers_once():
    for seed in range(3000):
        rng = random.Random(seed)
        typical = rng.uniform(0.01, 1.0)
        busy, next_shard = [], 0
        for w in range(1, rng.randint(1, 6)):
            n = rng.randint(1, 8)
            shards = tuple(range(next_shard, next_shard + n))
            next_shard += n
            copied = rng.randint(0, n)
            busy.append(
                Busy(
                    w,
                    shards[: n - copied],
                    n,
                    rng.randint(0, 5),
                    rng.uniform(0, 3),
                    rng.choice([None, typical * rng.uniform(0.5, 6)]),
                )
            )
        idle = rng.sample(range(10, 20), rng.randint(0, 4))
        copies = plan_copies(busy, idle, typical)
        planned = [s for ss in copies.plan.values() for s in ss]
        assert len(planned) == len(set(planned)), seed
        assert set(copies.plan) <= set(idle), seed
        uncopied = {s for b in busy for s in b.uncopied}
        assert set(planned) <= uncopied, seed
        for b in busy:
            mine = [s for s in planned if s in b.uncopied]
            if mine:
                assert is_straggler(b, typical) and b.worker in copies.projected, seed
                assert sorted(mine) == list(b.uncopied[len(b.uncopied) - len(mine) :]), (
                    seed
                )  # its tail


def test_busy_workers_read_the_round():
    p = Paces()
    p.note("estep", 1, 0.5)
    got = busy_workers(
        {1: [3, 1, 2], 2: [], 4: [9]},
        copied=[3],
        done={1: 2},
        sent_at={1: 10.0, 4: 11.0},
        now=12.0,
        paces=p,
        kind="estep",
    )
    assert got == [Busy(1, (1, 2), 3, 2, 2.0, 0.5), Busy(4, (9,), 1, 0, 1.0, None)]
    assert MULTIPLIER == 1.5 and COPY_COST > 1


def test_copies_cost_what_copies_took_and_a_gain_under_min_saving_is_not_worth_a_copy():
    p = Paces(window=3)
    assert p.copy_cost("estep") is None
    for s in (0.3, 0.5, 0.4):
        p.note_copy("estep", s)
    assert p.copy_cost("estep") == 0.4 and p.of("estep", 1) is None  # no place's pace
    slow = Busy(1, (0, 1, 2, 3), 4, 0, 0.0, 0.4)
    assert how_many(slow, helpers=2, typical=0.1) == 4
    assert how_many(slow, helpers=2, typical=0.1, copy=0.4) == 2  # dear copies: fewer of them
    assert how_many(slow, helpers=2, typical=0.1, copy=2.0) == 0  # dearer than waiting
    tiny = Busy(1, (0, 1), 2, 0, 0.0, 0.004)  # 2 ms shards at 4x: a copy would save < MIN_SAVING
    assert how_many(tiny, helpers=2, typical=0.001) == 0 and 0.008 - 0.00125 < MIN_SAVING
