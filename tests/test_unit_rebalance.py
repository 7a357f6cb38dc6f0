"""Speed-aware placement between rounds: targets, moves and hysteresis (pure)."""

from __future__ import annotations

import random

from mixle_mpi.policy.rebalance_plan import GAIN, ROUNDS, Rebalancer, moves, round_time, target


def test_the_target_gives_shards_in_proportion_to_speed_and_keeps_one_each():
    assert target(12, {1: 1.0, 2: 1.0, 3: 1.0}) == {1: 4, 2: 4, 3: 4}
    assert target(12, {1: 1.0, 2: 1.0, 3: 4.0}) == {
        1: 6,
        2: 5,
        3: 1,
    }  # ends at 6, not 8 with {5, 5, 2}
    assert target(13, {1: 1.0, 2: 1.0, 3: 2.0}) == {1: 6, 2: 5, 3: 2}
    assert target(12, {1: 1.0, 2: 1.0, 3: 100.0}) == {1: 6, 2: 5, 3: 1}
    assert target(2, {1: 1.0, 2: 1.0, 3: 1.0}) == {
        1: 1,
        2: 1,
        3: 1,
    }  # fewer shards than workers: one each


def test_the_target_ends_a_round_no_later_than_any_other_placement():
    for seed in range(500):
        rng = random.Random(seed)
        paces = {w: rng.uniform(0.1, 5.0) for w in range(1, rng.randint(2, 6))}
        total = rng.randint(len(paces), 30)
        best = round_time(target(total, paces), paces)
        for _ in range(20):
            cuts = sorted(rng.sample(range(1, total), len(paces) - 1)) if total > len(paces) else []
            sizes = [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=False)]
            if len(sizes) == len(paces) and min(sizes) >= 1:
                assert (
                    best <= round_time(dict(zip(sorted(paces), sizes, strict=False)), paces) + 1e-12
                ), seed


def test_moves_are_the_fewest_and_take_the_highest_ids_of_the_overloaded():
    owners = {1: [0, 3, 6, 9], 2: [1, 4, 7, 10], 3: [2, 5, 8, 11]}
    got = moves(owners, {1: 5, 2: 5, 3: 2})
    assert got == {8: (3, 1), 11: (3, 2)}
    assert moves(owners, {1: 4, 2: 4, 3: 4}) == {}


def test_shards_move_only_after_the_slowness_lasted_and_move_back_after_it_ends():
    r = Rebalancer()
    owners = {1: [0, 3, 6, 9], 2: [1, 4, 7, 10], 3: [2, 5, 8, 11]}
    slow = {1: 0.1, 2: 0.1, 3: 0.4}
    for _ in range(ROUNDS - 1):
        assert r.plan(owners, slow) == {}
    got = r.plan(owners, slow)
    assert got and all(src == 3 for src, _ in got.values())
    for s, (src, dst) in got.items():
        owners[src].remove(s)
        owners[dst].append(s)
    assert all(r.plan(owners, slow) == {} for _ in range(3 * ROUNDS))  # placed: nothing more moves
    well = {1: 0.1, 2: 0.1, 3: 0.1}
    for _ in range(ROUNDS - 1):
        assert r.plan(owners, well) == {}
    back = r.plan(owners, well)
    assert back and all(dst == 3 for _, dst in back.values())


def test_a_scatter_below_the_gain_or_a_blip_never_moves_anything():
    r = Rebalancer()
    owners = {1: [0, 3, 6, 9], 2: [1, 4, 7, 10], 3: [2, 5, 8, 11]}
    noisy = {1: 0.1, 2: 0.1, 3: 0.1 * (1 + GAIN * 0.9)}
    assert all(r.plan(owners, noisy) == {} for _ in range(10))
    for i in range(10):  # slow every other round: the streak never reaches ROUNDS
        assert r.plan(owners, {1: 0.1, 2: 0.1, 3: 0.4 if i % 2 else 0.1}) == {}
    assert r.plan({1: [0, 1]}, {1: 0.1}) == {} and r.plan(owners, {1: None, 2: None, 3: None}) == {}


def test_paces_within_the_spread_count_as_equal_so_a_shared_core_moves_nothing_but_shards_come_back():
    r = Rebalancer(rounds=1)
    owners = {1: [0, 3, 6, 9], 2: [1, 4, 7, 10], 3: [2, 5, 8, 11]}
    shared = {1: 0.010, 2: 0.019, 3: 0.010}  # three ranks on two cores: one looks slower
    assert r.plan(owners, shared) != {}  # by the paces alone, shards would move
    assert r.plan(owners, shared, spread=2.0) == {}
    uneven = {1: [0, 3, 6, 9, 2, 5, 13], 2: [1, 4, 7, 10, 8, 11, 14], 3: [12]}
    back = r.plan(uneven, {1: 0.01, 2: 0.01, 3: 0.018}, spread=2.0)  # recovered, within the spread
    assert back and all(dst == 3 for _, dst in back.values())
