"""Placement and recovery planning: pure functions over shard and worker ids."""

from __future__ import annotations

import itertools
import random

import pytest

from mixle_mpi.policy.placement import initial_placement, plan_recovery, spread


# -- initial_placement ---------------------------------------------------------------
def test_initial_placement_one_shard_per_worker():
    assert initial_placement(4, [1, 2, 3, 4]) == {1: [0], 2: [1], 3: [2], 4: [3]}


def test_initial_placement_worker_order_does_not_matter():
    assert initial_placement(4, [4, 2, 3, 1]) == {1: [0], 2: [1], 3: [2], 4: [3]}
    assert initial_placement(3, (w for w in (9, 5, 7))) == {5: [0], 7: [1], 9: [2]}


def test_initial_placement_over_decomposition():
    # S > W: round robin over workers in id order
    assert initial_placement(7, [1, 2, 3]) == {1: [0, 3, 6], 2: [1, 4], 3: [2, 5]}


def test_initial_placement_fewer_shards_than_workers_leaves_idle():
    owners = initial_placement(2, [1, 2, 3, 4])
    assert owners == {1: [0], 2: [1], 3: [], 4: []}


def test_initial_placement_zero_shards():
    assert initial_placement(0, [1, 2]) == {1: [], 2: []}


def test_initial_placement_no_workers():
    with pytest.raises(ValueError):
        initial_placement(3, [])


@pytest.mark.parametrize("S", range(0, 14))
@pytest.mark.parametrize("W", range(1, 7))
def test_initial_placement_properties(S, W):
    workers = list(range(1, W + 1))
    owners = initial_placement(S, workers)
    assert sorted(owners) == workers
    all_shards = [s for ss in owners.values() for s in ss]
    assert sorted(all_shards) == list(range(S))  # each shard exactly once
    loads = [len(ss) for ss in owners.values()]
    assert max(loads) - min(loads) <= 1
    for ss in owners.values():
        assert ss == sorted(ss)
    if S == W:
        assert owners == {w: [w - 1] for w in workers}


# -- spread ----------------------------------------------------------------------------
def test_spread_ties_go_to_lowest_id():
    assert spread([0], {5: 0, 3: 0, 9: 0}) == {3: [0]}
    assert spread([0, 1, 2], {5: 0, 3: 0, 9: 0}) == {3: [0], 5: [1], 9: [2]}


def test_spread_prefers_least_loaded():
    assert spread([0, 1, 2], {1: 2, 2: 0, 3: 1}) == {2: [0, 1], 3: [2]}


def test_spread_orders_shards_by_id():
    assert spread([7, 2, 5], {1: 0, 2: 0}) == {1: [2, 7], 2: [5]}


def test_spread_nothing_to_place():
    assert spread([], {1: 0}) == {}


def test_spread_no_candidates():
    with pytest.raises(ValueError):
        spread([0], {})


def test_spread_does_not_mutate_load():
    load = {1: 0, 2: 0}
    spread([0, 1, 2], load)
    assert load == {1: 0, 2: 0}


def test_spread_balance_random_loads():
    rng = random.Random(1234)
    for _ in range(500):
        workers = rng.sample(range(1, 30), rng.randint(1, 8))
        load = {w: rng.randint(0, 6) for w in workers}
        shards = rng.sample(range(100), rng.randint(0, 25))
        plan = spread(shards, load)
        placed = [s for ss in plan.values() for s in ss]
        assert sorted(placed) == sorted(shards)
        assert set(plan) <= set(load)
        final = {w: load[w] + len(plan.get(w, ())) for w in load}
        # water filling: nobody is pushed above max(initial max, final min + 1)
        assert max(final.values()) <= max(max(load.values()), min(final.values()) + 1)
        if len(set(load.values())) == 1:
            assert max(final.values()) - min(final.values()) <= 1


# -- every shard placed once ---------------------------------------------------------------
def test_initial_placement_places_every_shard_exactly_once():
    for S, W in itertools.product(range(0, 10), range(1, 6)):
        owners = initial_placement(S, range(1, W + 1))
        placed = sorted(s for ss in owners.values() for s in ss)
        assert placed == list(range(S))


# -- plan_recovery ----------------------------------------------------------------------
def test_plan_recovery_spreads_over_survivors_by_resident_load():
    owners = {1: [0, 4], 2: [1, 5], 3: [2], 4: [3]}
    # worker 2 died: shards 1 and 5 are orphans; 3 and 4 hold fewest resident shards
    assert plan_recovery([1, 5], owners, [1, 3, 4]) == {3: [1], 4: [5]}


def test_plan_recovery_survivor_without_owner_entry_counts_as_empty():
    owners = {1: [0, 1], 2: [2]}
    assert plan_recovery([2], owners, [1, 7]) == {7: [2]}


def test_plan_recovery_no_survivors():
    with pytest.raises(ValueError):
        plan_recovery([0], {1: [0]}, [])


def test_plan_recovery_ties_lowest_id():
    owners = {1: [0], 2: [1], 3: [2]}
    assert plan_recovery([0], owners, [3, 2]) == {2: [0]}


def _failed_sets(workers):
    for k in range(1, len(workers)):  # at least one survivor
        yield from itertools.combinations(workers, k)


def test_plan_recovery_properties_over_many_cases():
    cases = 0
    for S in range(1, 13):
        for W in range(1, 7):
            workers = list(range(1, W + 1))
            owners = initial_placement(S, workers)
            for failed in _failed_sets(workers):
                survivors = [w for w in workers if w not in failed]
                orphans = sorted(s for w in failed for s in owners[w])
                plan = plan_recovery(orphans, owners, survivors)
                placed = [s for ss in plan.values() for s in ss]
                assert sorted(placed) == orphans, (S, W, failed)  # each orphan exactly once
                assert set(plan) <= set(survivors), (S, W, failed)
                final = {w: len(owners[w]) + len(plan.get(w, ())) for w in survivors}
                assert sum(final.values()) == S
                # initial_placement loads differ by <= 1, so after recovery they still do
                assert max(final.values()) - min(final.values()) <= 1, (S, W, failed, plan)
                cases += 1
    assert cases > 500


def test_plan_recovery_equal_loads_stay_balanced():
    rng = random.Random(99)
    for _ in range(300):
        W = rng.randint(1, 8)
        survivors = rng.sample(range(1, 40), W)
        level = rng.randint(0, 5)
        owners = {w: list(range(i * level, (i + 1) * level)) for i, w in enumerate(survivors)}
        orphans = rng.sample(range(1000, 1100), rng.randint(0, 20))
        plan = plan_recovery(orphans, owners, survivors)
        assert sorted(s for ss in plan.values() for s in ss) == sorted(orphans)
        final = [level + len(plan.get(w, ())) for w in survivors]
        assert max(final) - min(final) <= 1


# -- the default number of shards -------------------------------------------------------------
def test_default_num_shards_depends_on_the_rows_alone():
    from mixle_mpi.core.layout import MAX_SHARDS, MIN_SHARDS, default_num_shards

    assert [default_num_shards(n) for n in (1, 7, 150, 16_000, 200_000, 10**6, 10**8)] == [
        1,
        7,
        16,
        16,
        20,
        100,
        MAX_SHARDS,
    ]
    assert all(
        MIN_SHARDS <= default_num_shards(n) <= MAX_SHARDS for n in range(16, 5_000_000, 9_973)
    )


# -- spread's heap against the linear scan it replaced ---------------------------------------
def reference_spread(shards, load):
    """The original spread: for each shard in id order, a scan of every candidate."""
    if not load:
        raise ValueError("no candidate workers to place shards on")
    current = dict(load)
    plan = {}
    for s in sorted(shards):
        target = min(current, key=lambda w: (current[w], w))
        plan.setdefault(target, []).append(s)
        current[target] += 1
    return plan


def test_spread_is_the_linear_scan_shard_for_shard():
    """Property test: random loads (ties, gaps, negative and large loads, many workers),
    random shard sets with duplicates: the same plan, in the same insertion order."""
    rng = random.Random(20261201)
    for _ in range(3000):
        workers = rng.sample(range(0, 500), rng.randint(1, rng.choice([3, 10, 60])))
        top = rng.choice([0, 1, 3, 50])
        load = {w: rng.randint(-2 if rng.random() < 0.1 else 0, top) for w in workers}
        shards = [rng.randrange(400) for _ in range(rng.randint(0, rng.choice([5, 40, 300])))]
        got, want = spread(shards, load), reference_spread(shards, load)
        assert list(got.items()) == list(want.items()), (shards, load)
        assert list(
            plan_recovery(shards, {w: [0] * n for w, n in load.items() if n > 0}, workers).items()
        ) == list(reference_spread(shards, {w: max(n, 0) for w, n in sorted(load.items())}).items())


def test_plan_recovery_splits_evenly_when_the_survivors_hold_equal_loads():
    """Issue 15: with the survivors' resident loads equal (the initial placement, any S and
    W), no survivor recomputes more than ceil(orphans / survivors) shards. With unequal loads
    (earlier failures, or an idle spare) the least-loaded take more, which keeps the slowest
    survivor's whole work this round the least, and lets an idle spare adopt warm."""
    for S in range(1, 40):
        for W in range(2, 9):
            owners = initial_placement(S, range(1, W + 1))
            if len({len(v) for v in owners.values()}) != 1:
                continue
            for dead in range(1, W + 1):
                survivors = [w for w in owners if w != dead]
                plan = plan_recovery(owners[dead], owners, survivors)
                share = -(-len(owners[dead]) // len(survivors))
                assert all(len(ss) <= share for ss in plan.values()), (S, W, dead, plan)


def test_only_workers_that_can_read_the_store_and_have_enough_to_load_read_their_own():
    from mixle_mpi.policy.placement import own_readers

    loads = {1: 10 << 20, 2: 1 << 20, 3: 10 << 20, 4: 8 << 20}
    assert own_readers(loads, can_read=[1, 2, 4]) == {1, 4}  # 2: too little; 3: cannot open it
    assert own_readers(loads, can_read=[1, 2, 3, 4], min_bytes=0) == {1, 2, 3, 4}
    assert own_readers(loads, can_read=[]) == set()


def test_a_replacement_goes_back_to_its_host_while_it_is_up_else_to_the_least_loaded_one():
    from mixle_mpi.policy.placement import respawn_host

    assert respawn_host("a", ["a", "a", "a"], driver_host="a") is None  # one host: MPI maps it
    assert respawn_host("b", ["b", "c", "c"], driver_host="a") == "b"  # b is up (a live worker)
    assert respawn_host("b", ["c", "c", "d"], driver_host="a") == "d"  # b is gone: fewest there
    assert respawn_host("b", ["d", "c"], driver_host="a") == "c"  # ties: by name
    assert respawn_host(None, [], driver_host="a") is None
    assert respawn_host("b", [], driver_host="a") is None  # nothing live to judge by
    # a host whose process computed other bits (numerics refused) gets no replacement
    assert respawn_host("b", ["b", "c", "c"], driver_host="a", avoid={"b"}) == "c"
    assert respawn_host("b", ["b", "c"], driver_host="a", avoid={"b", "c"}) is None


def test_driver_share_is_a_workers_share_of_the_lowest_ids_and_none_when_off():
    from mixle_mpi.policy.placement import driver_share

    assert driver_share(16, 3, True) == [0, 1, 2, 3]
    assert driver_share(2, 1, True) == [0]
    assert driver_share(3, 3, True) == []  # S <= W: every shard stays a worker's
    assert driver_share(256, 31, True) == list(range(8))
    assert driver_share(16, 3, False) == [] and driver_share(16, 0, True) == []


def test_driver_share_is_none_when_its_stored_bytes_are_over_the_cap():
    from mixle_mpi.policy.placement import driver_share

    sizes = {0: 100, 1: 300, 2: 50, 3: 50}.get
    assert driver_share(16, 3, True, sizes, max_bytes=500) == [0, 1, 2, 3]  # 500 bytes: at the cap
    assert driver_share(16, 3, True, sizes, max_bytes=499) == []  # over it: all or nothing
    assert driver_share(16, 3, True, sizes, max_bytes=None) == [0, 1, 2, 3]  # no cap
    assert driver_share(3, 3, True, sizes, max_bytes=0) == []  # no share, nothing to weigh
    assert driver_share(16, 3, False, sizes, max_bytes=10**9) == []


@pytest.mark.parametrize("S,W", [(16, 3), (2, 1), (7, 2), (256, 31), (5, 5)])
def test_initial_placement_skips_the_drivers_share_and_deals_the_rest_evenly(S, W):
    from mixle_mpi.policy.placement import driver_share

    here = driver_share(S, W, True)
    owners = initial_placement(S, range(1, W + 1), skip=here)
    placed = sorted(s for ss in owners.values() for s in ss)
    assert placed == [s for s in range(S) if s not in here]
    counts = [len(ss) for ss in owners.values()]
    assert max(counts) - min(counts) <= 1
    assert len(here) <= min(counts) + 1  # the driver computes no more than a worker
    assert initial_placement(S, range(1, W + 1), skip=()) == initial_placement(S, range(1, W + 1))


def test_a_replacement_is_known_to_start_here_only_when_named_here_or_everything_is_on_one_host():
    from mixle_mpi.policy.placement import replacement_here

    assert replacement_here("a", ["b"], "a", {})  # asked for on the driver's host
    assert not replacement_here("b", ["a"], "a", {})  # asked for on another
    assert replacement_here(None, ["a", "a"], "a", {})  # one host: MPI maps it there
    assert not replacement_here(None, ["a", "b"], "a", {})  # MPI may map it on b
    assert not replacement_here(
        None, ["a"], "a", {"SLURM_JOB_NUM_NODES": "2"}
    )  # a host not used yet
    assert replacement_here(None, ["a"], "a", {"SLURM_JOB_NUM_NODES": "1"})
    assert not replacement_here(None, ["a"], "a", {"PBS_NUM_NODES": "x"})  # unreadable: not sure
