"""RoundState: which reply counts, what is an orphan, what the driver does next (pure)."""

from __future__ import annotations

import random

from mixle_mpi.policy.rounds import Done, NeedWorkers, Recover, RoundState, Wait


def test_first_dispatch_is_each_live_workers_own_missing_shards():
    rs = RoundState(5, frozenset({4}))
    assert rs.own_work({1: [0, 3], 2: [1, 4], 3: [2]}, {1: 0, 2: 0}) == {1: [0, 3], 2: [1]}


def test_a_result_counts_once_and_only_from_its_live_assignee():
    rs = RoundState(2)
    rs.sent(1, 0, [0, 1])
    live = {1: 0, 2: 0}
    assert not rs.accept(2, 0, 0, live)           # not its shard
    assert not rs.accept(1, 1, 0, live)           # another incarnation of the place
    assert rs.accept(1, 0, 0, live)
    assert not rs.accept(1, 0, 0, live)           # a duplicate
    assert not rs.accept(1, 0, 1, {2: 0})         # worker 1 failed: its late reply is dropped
    assert rs.orphans({2: 0}) == [1]


def test_orphans_go_to_survivors_and_a_recomputed_result_replaces_nothing():
    rs = RoundState(4)
    owners = {1: [0, 2], 2: [1, 3]}
    for w, sids in rs.own_work(owners, {1: 0, 2: 0}).items():
        rs.sent(w, 0, sids)
    assert rs.accept(1, 0, 0, {1: 0, 2: 0})
    assert isinstance(rs.next_step(owners, {1: 0, 2: 0}), Wait)
    step = rs.next_step(owners, {2: 0})           # worker 1 died holding shard 2
    assert step == Recover({2: [2]})
    rs.sent(2, 0, [2], recovery=True)
    for s in (1, 2, 3):
        assert rs.accept(2, 0, s, {2: 0})
    assert isinstance(rs.next_step(owners, {2: 0}), Done)
    assert (rs.reused, sorted(rs.recomputed)) == ([0, 1, 3], [2])


def test_no_live_worker_asks_for_workers_and_a_replacement_process_gets_the_orphans():
    rs = RoundState(2)
    rs.sent(1, 0, [0, 1])
    assert rs.next_step({1: [0, 1]}, {}) == NeedWorkers([0, 1])
    step = rs.next_step({1: [0, 1]}, {1: 1})      # respawned: incarnation 1 holds the place now
    assert step == Recover({1: [0, 1]})
    assert not rs.accept(1, 0, 0, {1: 1})          # the dead incarnation's reply


def test_random_event_orders_fold_every_shard_exactly_once_from_an_accepted_reply():
    """Property test: random owners, replies in random order (duplicates and strangers
    included), random failures; at the end exactly one accepted result per shard, each
    from the process that was its assignee and live at that moment."""
    for seed in range(2000):
        rng = random.Random(seed)
        workers = list(range(1, rng.randint(2, 6)))
        shards = rng.randint(1, 12)
        owners = {w: [s for s in range(shards) if s % len(workers) == i] for i, w in enumerate(workers)}
        live = {w: 0 for w in workers}
        rs = RoundState(shards)
        inflight: list[tuple[int, int, int]] = []
        for w, sids in rs.own_work(owners, live).items():
            rs.sent(w, 0, sids)
            inflight += [(w, 0, s) for s in sids]
        folded: dict[int, tuple[int, int]] = {}
        for _ in range(10_000):
            step = rs.next_step(owners, live)
            if isinstance(step, Done):
                break
            if isinstance(step, NeedWorkers):
                w = rng.choice(workers)
                live[w] = max([i for (x, i, _) in inflight if x == w] + [0]) + 1  # a respawn
                continue
            if isinstance(step, Recover):
                for w, sids in step.plan.items():
                    rs.sent(w, live[w], sids, recovery=True)
                    inflight += [(w, live[w], s) for s in sids]
                continue
            if rng.random() < 0.1 and live:
                live.pop(rng.choice(sorted(live)))  # a failure is detected
                continue
            w, inc, s = inflight.pop(rng.randrange(len(inflight)))
            if rng.random() < 0.2:
                inflight.append((w, inc, s))  # delivered twice
            if rs.accept(w, inc, s, live):
                assert s not in folded, f"seed {seed}: shard {s} accepted twice"
                assert live.get(w) == inc
                folded[s] = (w, inc)
        else:
            raise AssertionError(f"seed {seed}: the round never ended")
        assert sorted(folded) == list(range(shards)), f"seed {seed}"
