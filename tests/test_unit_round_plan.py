"""RoundState: which reply counts, what is an orphan, what the driver does next (pure)."""

from __future__ import annotations

import random

import pytest

from mixle_mpi.policy.round_plan import Done, NeedWorkers, Recover, RoundState, Wait


def test_first_dispatch_is_each_live_workers_own_missing_shards():
    rs = RoundState(5, frozenset({4}))
    assert rs.own_work({1: [0, 3], 2: [1, 4], 3: [2]}, {1: 0, 2: 0}) == {1: [0, 3], 2: [1]}


def test_a_result_counts_once_and_only_from_its_live_assignee():
    rs = RoundState(2)
    rs.sent(1, 0, [0, 1])
    live = {1: 0, 2: 0}
    assert not rs.accept(2, 0, 0, live)  # not its shard
    assert not rs.accept(1, 1, 0, live)  # another incarnation of the place
    assert rs.accept(1, 0, 0, live)
    assert not rs.accept(1, 0, 0, live)  # a duplicate
    assert not rs.accept(1, 0, 1, {2: 0})  # worker 1 failed: its late reply is dropped
    assert rs.orphans({2: 0}) == [1]


def test_orphans_go_to_survivors_and_a_recomputed_result_replaces_nothing():
    rs = RoundState(4)
    owners = {1: [0, 2], 2: [1, 3]}
    for w, sids in rs.own_work(owners, {1: 0, 2: 0}).items():
        rs.sent(w, 0, sids)
    assert rs.accept(1, 0, 0, {1: 0, 2: 0})
    assert isinstance(rs.next_step(owners, {1: 0, 2: 0}), Wait)
    step = rs.next_step(owners, {2: 0})  # worker 1 died holding shard 2
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
    step = rs.next_step({1: [0, 1]}, {1: 1})  # respawned: incarnation 1 holds the place now
    assert step == Recover({1: [0, 1]})
    assert not rs.accept(1, 0, 0, {1: 1})  # the dead incarnation's reply


def simulate_round(seed: int, ahead: float, speculate: float = 0.0) -> RoundState:
    """One random round: 1-5 workers, 1-12 shards dealt round-robin, replies in random order
    (duplicates included), random failures and respawns. With ``ahead`` > 0 a task sends a
    shard's payload ahead of its result with that probability, and a process's messages
    then arrive in the order it sent them (MPI's, on one communicator and tag). Asserts that
    every shard has exactly one accepted result and one folded payload, each from a process
    that was its live assignee then."""
    rng = random.Random(seed)
    workers = list(range(1, rng.randint(2, 6)))
    shards = rng.randint(1, 12)
    owners = {w: [s for s in range(shards) if s % len(workers) == i] for i, w in enumerate(workers)}
    live = {w: 0 for w in workers}
    rs = RoundState(shards)
    inflight: list[tuple[str, int, int, int]] = []  # (what, worker, incarnation, shard)

    def send(w, inc, sids):
        for s in sids:
            if rng.random() < ahead:
                inflight.append(("stats", w, inc, s))
            inflight.append(("result", w, inc, s))

    for w, sids in rs.own_work(owners, live).items():
        rs.sent(w, 0, sids)
        send(w, 0, sids)
    folded: dict[int, tuple[int, int]] = {}
    accepted: set = set()
    for _ in range(10_000):
        step = rs.next_step(owners, live)
        if isinstance(step, Done):
            break
        if isinstance(step, NeedWorkers):
            w = rng.choice(workers)
            live[w] = max([i for (_, x, i, _) in inflight if x == w] + [0]) + 1  # a respawn
            continue
        if isinstance(step, Recover):
            for w, sids in step.plan.items():
                rs.sent(w, live[w], sids, recovery=True)
                send(w, live[w], sids)
            continue
        if rng.random() < 0.1 and live:
            live.pop(rng.choice(sorted(live)))  # a failure is detected
            continue
        if rng.random() < speculate and live:  # copies of some outstanding shards, to anyone live
            w = rng.choice(sorted(live))
            pending = sorted({s for ss in rs.outstanding(live).values() for s in ss})
            sids = rng.sample(pending, min(len(pending), rng.randint(1, 3)))
            rs.sent(w, live[w], sids, copy=True)
            send(w, live[w], [s for s in sids if (w, live[w]) in rs.holders(s)])
            continue
        if not inflight:
            continue
        i = rng.randrange(len(inflight))
        if ahead:  # the oldest message of that process
            i = next(j for j, m in enumerate(inflight) if m[1:3] == inflight[i][1:3])
        what, w, inc, s = inflight.pop(i)
        if rng.random() < 0.2:
            inflight.append((what, w, inc, s))  # delivered twice
        if what == "stats":
            if rs.take_stats(w, inc, s, live):
                assert s not in folded, f"seed {seed}: shard {s} folded twice"
                assert live.get(w) == inc
                folded[s] = (w, inc)
            continue
        holds = (w, inc) in rs.holders(s)
        if rs.accept(w, inc, s, live):
            assert holds, f"seed {seed}: shard {s} accepted from a process that does not compute it"
            assert s not in accepted, f"seed {seed}: shard {s} accepted twice"
            assert live.get(w) == inc
            accepted.add(s)
            if rs.fold_once(s):
                assert s not in folded, f"seed {seed}: shard {s} folded twice"
                folded[s] = (w, inc)
    else:
        raise AssertionError(f"seed {seed}: the round never ended")
    assert sorted(accepted) == sorted(folded) == list(range(shards)), f"seed {seed}"
    return rs


def test_random_event_orders_fold_every_shard_exactly_once_from_an_accepted_reply():
    for seed in range(2000):
        simulate_round(seed, ahead=0.0)


class ReferenceRoundState(RoundState):
    """The original orphans: a scan of every shard id."""

    def orphans(self, live):
        out = []
        for s in range(self.num_shards):
            if s in self.accepted:
                continue
            who = self.assigned.get(s)
            if who is None or live.get(who[0]) != who[1]:
                out.append(s)
        return out


def test_indexed_orphans_are_the_full_scan_on_random_event_sequences():
    """Property test: random sends (some to dead or replaced processes, some reassigning
    accepted or out-of-range shards), replies from anyone, failures and respawns, asked in
    random places: orphans, next_step and accept agree with the full scan every time."""
    for seed in range(1500):
        rng = random.Random(seed)
        workers = list(range(1, rng.randint(2, 7)))
        shards = rng.randint(0, 25)
        preloaded = (
            frozenset(rng.sample(range(shards + 2), rng.randint(0, 2)))
            if rng.random() < 0.3
            else frozenset()
        )
        owners = {
            w: [s for s in range(shards) if s % len(workers) == i] for i, w in enumerate(workers)
        }
        live = {w: 0 for w in workers}
        new, ref = RoundState(shards, preloaded), ReferenceRoundState(shards, preloaded)
        if rng.random() < 0.5:  # the driver's first dispatch, or none and recovery of everything
            for w, sids in new.own_work(owners, live).items():
                new.sent(w, 0, sids)
                ref.sent(w, 0, sids)
        for _ in range(rng.randint(0, 80)):
            r = rng.random()
            if r < 0.15:  # a failure, or a respawn with the next incarnation
                w = rng.choice(workers)
                if w in live and rng.random() < 0.6:
                    del live[w]
                else:
                    live[w] = live.get(w, 0) + 1
            elif r < 0.35:  # a task reaches some process
                w, inc = rng.choice(workers), rng.randint(0, 2)
                sids = [rng.randrange(shards + 2) for _ in range(rng.randint(0, 4))]
                recovery = rng.random() < 0.5
                new.sent(w, inc, sids, recovery)
                ref.sent(w, inc, sids, recovery)
            elif r < 0.7:  # a reply from anyone
                if new.assigned and rng.random() < 0.8:
                    s = rng.choice(sorted(new.assigned))
                    w, inc = (
                        new.assigned[s]
                        if rng.random() < 0.8
                        else (rng.choice(workers), rng.randint(0, 2))
                    )
                else:
                    s, w, inc = rng.randrange(shards + 2), rng.choice(workers), rng.randint(0, 2)
                assert new.accept(w, inc, s, live) == ref.accept(w, inc, s, live), seed
            else:
                assert new.orphans(live) == ref.orphans(live), seed
                step = new.next_step(owners, live)
                assert step == ref.next_step(owners, live), seed
                if isinstance(step, Recover) and rng.random() < 0.7:  # the plan is carried out
                    for w, sids in step.plan.items():
                        new.sent(w, live[w], sids, True)
                        ref.sent(w, live[w], sids, True)
            assert (new.assigned, new.accepted, new.recomputed, new.done()) == (
                ref.assigned,
                ref.accepted,
                ref.recomputed,
                ref.done(),
            ), seed
        assert new.orphans(live) == ref.orphans(live) and new.reused == ref.reused, seed


def test_the_round_waits_only_on_workers_with_unaccepted_shards():
    state = RoundState(5)
    assert state.waiting_on() == []
    state.sent(1, 0, [0, 3])
    state.sent(2, 0, [1])
    state.sent(3, 0, [2, 4])
    assert state.waiting_on() == [1, 2, 3]
    assert state.accept(2, 0, 1, {1: 0, 2: 0, 3: 0})
    assert state.waiting_on() == [1, 3]  # worker 2 has nothing left to answer for
    state.sent(1, 0, [2, 4], recovery=True)  # worker 3's shards went to worker 1
    assert state.waiting_on() == [1]
    for s in (0, 2, 3, 4):
        assert state.accept(1, 0, s, {1: 0})
    assert state.waiting_on() == [] and state.done()


def test_the_drivers_own_shards_are_never_orphans_and_count_once_done():
    """driver_computes: shards 0 and 1 are computed by the driver; a failed worker's shards
    are recovered, the driver's never, done or not yet."""
    state = RoundState(6, here=frozenset({0, 1}))
    live = {1: 0, 2: 0}
    owners = {1: [2, 4], 2: [3, 5]}
    for w, sids in state.own_work(owners, live).items():
        state.sent(w, 0, sids)
    assert state.orphans({2: 0}) == [2, 4]  # worker 1 failed; 0 and 1 are not orphans
    with pytest.raises(ValueError):
        state.done_here(2)
    state.done_here(0)
    state.done_here(1)
    for s in (3, 5):
        assert state.accept(2, 0, s, {2: 0})
    assert not state.done()
    step = state.next_step({2: [2, 3, 4, 5]}, {2: 0})
    assert isinstance(step, Recover) and step.plan == {2: [2, 4]}
    state.sent(2, 0, [2, 4], recovery=True)
    for s in (2, 4):
        assert state.accept(2, 0, s, {2: 0})
    assert state.done() and state.reused == [0, 1, 3, 5] and sorted(state.recomputed) == [2, 4]


def test_a_payload_sent_ahead_is_folded_once_from_its_live_assignee_and_never_again():
    """A task that also scores sends each shard's E-step payload ahead of its result
    (protocol.Stats). It is folded on a result's terms, once; when its sender dies before
    the result, the shard is recomputed for its scores and its payload is not folded again."""
    state = RoundState(2)
    state.sent(1, 0, [0])
    state.sent(2, 0, [1])
    live = {1: 0, 2: 0}
    assert not state.take_stats(2, 0, 0, live)  # not its shard
    assert not state.take_stats(1, 1, 0, live)  # another incarnation of the place
    assert not state.take_stats(1, 0, 0, {2: 0})  # worker 1 is known dead
    assert state.take_stats(1, 0, 0, live)
    assert not state.take_stats(1, 0, 0, live)  # a duplicate
    assert not state.accepted  # the scores are still to come
    del live[1]  # worker 1 dies before its result
    assert state.next_step({2: [1]}, live) == Recover({2: [0]})
    state.sent(2, 0, [0], recovery=True)
    assert not state.take_stats(2, 0, 0, live)  # the recomputation's payload: folded already
    assert state.accept(2, 0, 0, live)  # its scores count
    assert not state.fold_once(0)  # and its payload is not folded again
    assert state.take_stats(2, 0, 1, live) and state.accept(2, 0, 1, live)
    assert not state.fold_once(1)
    assert state.done() and state.folded == {0, 1}


def test_random_event_orders_with_payloads_ahead_fold_each_shard_once():
    """As above, each task sending most payloads ahead of their results: a payload folded
    ahead is never folded again, whoever recomputes its shard after a failure."""
    for seed in range(2000):
        simulate_round(seed, ahead=0.7)


def test_random_event_orders_with_speculative_copies_fold_each_shard_once():
    """Copies of outstanding shards sent to any live process at random moments, besides
    failures, respawns, duplicates and payloads ahead: still one accepted reply and one fold
    per shard, each from a live process that computes it, and every round ends."""
    won = sum(
        len(simulate_round(seed, ahead=0.3 if seed % 2 else 0.0, speculate=0.15).won)
        for seed in range(2000)
    )
    assert won > 500  # the copies did win, often


def test_a_copy_wins_once_and_a_shard_is_an_orphan_only_when_no_holder_lives():
    rs = RoundState(4)
    rs.sent(1, 0, [0, 1])
    rs.sent(2, 0, [2, 3])
    live = {1: 0, 2: 0, 3: 0}
    assert rs.idle(live) == [3] and rs.outstanding(live) == {1: [0, 1], 2: [2, 3]}
    rs.sent(3, 0, [1, 3], copy=True)
    assert rs.idle(live) == [] and rs.outstanding(live) == {
        1: [0, 1],
        2: [2, 3],
    }  # copies are not their own
    assert rs.holders(1) == {(1, 0), (3, 0)}
    assert rs.accept(3, 0, 1, live) and rs.won == {1: (3, 0)}
    assert not rs.accept(1, 0, 1, live)  # the straggler's late copy is dropped
    del live[2]  # 2 dies: shard 3 has a live copy, 2 none
    assert rs.orphans(live) == [2] and rs.assigned[3] == (3, 0)
    del live[3]  # and now the copy's holder too
    assert rs.orphans(live) == [2, 3]
    assert rs.accept(1, 0, 0, live) and rs.outstanding(live) == {} and rs.idle(live) == [1]


def test_a_copy_is_never_made_of_an_accepted_shard_or_for_its_own_assignee():
    rs = RoundState(2)
    rs.sent(1, 0, [0, 1])
    live = {1: 0, 2: 0}
    assert rs.accept(1, 0, 0, live)
    rs.sent(2, 0, [0], copy=True)
    rs.sent(1, 0, [1], copy=True)
    assert rs.copies == {} and rs.idle(live) == [2]
