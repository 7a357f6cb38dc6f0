"""policy/places: the one owner of the job's placement, and the invariants it checks."""

from __future__ import annotations

import pytest

from mixle_mpi.policy.places import PlacementBroken, Places


def _places() -> Places:
    # 7 shards, places 1-3 hold them round robin less the driver's shard 0; 4 is a spare
    return Places(7, [1, 2, 3], [4], [0])


def test_the_start_deals_the_shards_round_robin_less_the_drivers_own():
    p = _places()
    assert p.here == [0] and p.snapshot() == {1: [1, 4], 2: [2, 5], 3: [3, 6], 4: []}
    assert p.idle([1, 2, 3, 4]) == [4] and p.holding([1, 3]) == {1: [1, 4], 3: [3, 6]}
    p.check()


def test_a_recovered_shard_is_kept_by_its_survivor_and_released_when_its_place_holds_it():
    p = _places()
    p.keep([2, 5], 1)  # place 2 failed: worker 1 recomputed its shards
    assert p.kept_by(1) == {2, 5} and p.work([1, 3]) == {1: [1, 2, 4, 5], 3: [3, 6]}
    p.check()
    assert p.release([2, 5]) == {1: [2, 5]} and not p.any_kept()  # place 2's replacement is in
    p.check()


def test_a_replacement_recomputing_its_own_place_keeps_nothing():
    """Found by the simulation (seed 90): a replacement recomputing what its predecessor
    left was recorded as keeping its own shards, which held rebalancing off for good."""
    p = _places()
    p.keep([1, 4], 1)
    assert not p.any_kept()
    p.check()


def test_a_spare_adopting_a_place_makes_its_copies_of_it_resident_and_keeps_the_rest():
    p = _places()
    p.keep([2], 4)  # the spare recomputed shard 2 of failed place 2
    p.keep([3], 4)  # and shard 3 of failed place 3
    assert p.adopt(4, 2) == {2, 3}
    assert 4 not in p.snapshot() and p.kept == {3: 2}  # shard 3 kept under its new id
    p.check()


def test_a_blacklisted_places_shards_move_and_a_receiver_that_kept_one_loads_only_the_rest():
    p = _places()
    p.keep([2], 1)
    plan, load = p.migrate([2], [1, 3])
    assert sorted(s for ss in plan.values() for s in ss) == [2, 5] and p.of(2) == []
    receiver = next(w for w, ss in plan.items() if 2 in ss)
    assert 2 not in load[receiver] and p.kept_by(1) == set()
    p.check()
    assert p.migrate([2], [1, 3]) == ({}, {})  # nothing left to move


def test_rebalancing_moves_one_shard_between_places_in_id_order():
    p = _places()
    p.move(4, 1, 3)
    assert p.of(1) == [1] and p.of(3) == [3, 4, 6]
    p.check()


@pytest.mark.parametrize(
    "breakage, says",
    [
        (lambda p: p.owners.update({2: [1, 2, 5]}), "owned by place 1 and by place 2"),
        (lambda p: p.owners[1].remove(4), "owned by nobody"),
        (lambda p: p.kept.update({4: 1}), "kept by its own place 1"),
        (lambda p: p.owners.update({3: [6, 3]}), "not in id order"),
        (lambda p: p.kept.update({0: 2}), "no place owns it"),
    ],
)
def test_each_broken_invariant_is_named(breakage, says):
    p = _places()
    breakage(p)
    with pytest.raises(PlacementBroken, match=says):
        p.check()


def test_the_simulation_checks_the_placement_after_every_step(monkeypatch):
    """The recovery bug of seed 90 put back: the simulation stops at the step that broke it."""
    from mixle_mpi.policy import places
    from mixle_mpi.sim import check, world

    monkeypatch.setattr(
        places.Places,
        "keep",
        lambda self, shards, holder: self.kept.update((s, holder) for s in shards),
    )
    with pytest.raises(world.Violation, match=r"seed 90: the placement broke: .* its own place"):
        check.simulate(range(91))
