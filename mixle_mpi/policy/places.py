"""Where each shard lives: the one owner of the job's placement (pure).

A shard belongs to one worker place (``owners``), or to the driver, which computes it itself
(``here``). A live worker may also keep another place's shard encoded (``kept``): it
recomputed it for a failed place, or computed a speculative copy whose place then failed,
so that the next round, a replacement still joining or a spare adopting the place needs no
load. Every change goes through a method here, and :meth:`Places.check` says whether the
invariants hold; the simulation calls it after every step of the driver.
"""

from __future__ import annotations

from collections.abc import Iterable

from mixle_mpi.policy.join_plan import release_plan, work_of
from mixle_mpi.policy.placement import initial_placement
from mixle_mpi.policy.reconfig_plan import idle_places, migrate


class PlacementBroken(AssertionError):
    """An invariant of the placement does not hold (a bug of the driver, never of the input)."""


class Places:
    """The placement of ``num_shards`` shards over the worker places ``holders`` (round robin,
    less the driver's own ``here``) and the shardless ``spares``."""

    def __init__(
        self, num_shards: int, holders: Iterable[int], spares: Iterable[int], here: Iterable[int]
    ) -> None:
        self.num_shards = num_shards
        self.here: list[int] = sorted(here)  # the shards the driver computes itself
        self.owners: dict[int, list[int]] = {
            **initial_placement(num_shards, list(holders), skip=self.here),
            **{w: [] for w in spares},
        }
        self.kept: dict[int, int] = {}  # shard -> the live worker keeping it for its place

    # -- reading ---------------------------------------------------------------------------
    def of(self, worker: int) -> list[int]:
        """The shards of ``worker``'s place (a copy)."""
        return list(self.owners.get(worker, ()))

    def snapshot(self) -> dict[int, list[int]]:
        """Each place's shards, as a copy to read (the decisions of ``reconfig_plan``)."""
        return {w: list(ss) for w, ss in self.owners.items()}

    def place_of(self) -> dict[int, int]:
        """shard -> the place that owns it (the driver's own shards are in none)."""
        return {s: w for w, ss in self.owners.items() for s in ss}

    def work(self, live: Iterable[int]) -> dict[int, list[int]]:
        """Each live worker's resident work for a round (``join_plan.work_of``)."""
        return work_of(self.owners, self.kept, live)

    def holding(self, live: Iterable[int]) -> dict[int, list[int]]:
        """The live places that own shards, with their shards."""
        return {w: self.of(w) for w in live if self.owners.get(w)}

    def idle(self, live: Iterable[int]) -> list[int]:
        """Live places that own no shard (the spares), lowest id first."""
        return idle_places(self.owners, live)

    def owns_any(self, workers: Iterable[int]) -> bool:
        return any(self.owners.get(w) for w in workers)

    def kept_by(self, holder: int) -> set[int]:
        return {s for s, h in self.kept.items() if h == holder}

    def kept_at(self, shard: int, holder: int) -> bool:
        return self.kept.get(shard) == holder

    def any_kept(self) -> bool:
        return bool(self.kept)

    # -- kept copies -----------------------------------------------------------------------
    def keep(self, shards: Iterable[int], holder: int) -> None:
        """``holder`` recomputed ``shards`` for their failed place and keeps them encoded. A
        shard of its own place (a replacement recomputing what its predecessor left) is
        resident there, not kept: a kept entry would hold rebalancing off for good."""
        own = set(self.owners.get(holder, ()))
        self.kept.update((s, holder) for s in shards if s not in own)

    def keep_copy(self, shard: int, holder: int) -> None:
        """A speculative copy stays where it was computed, unless another holder keeps it."""
        self.kept.setdefault(shard, holder)

    def drop_holder(self, worker: int) -> None:
        """``worker`` failed: the copies it kept are gone with it."""
        self.kept = {s: h for s, h in self.kept.items() if h != worker}

    def release(self, shards: Iterable[int]) -> dict[int, list[int]]:
        """``shards`` are resident at their owner again: who drops which kept copy."""
        shards = list(shards)
        plan = release_plan(self.kept, shards)
        for s in shards:
            self.kept.pop(s, None)
        return plan

    # -- moves -----------------------------------------------------------------------------
    def adopt(self, spare: int, worker: int) -> set[int]:
        """Spare ``spare`` takes over the place ``worker`` under its id: the spare's own place
        goes, its kept copies of that place become resident, and the rest it keeps under its
        new id. Returns the copies it held."""
        self.owners.pop(spare, None)
        warm = self.kept_by(spare)
        place = set(self.owners.get(worker, ()))
        for s in warm:
            if s in place:
                del self.kept[s]
            else:
                self.kept[s] = worker
        return warm

    def migrate(
        self, blacklisted: Iterable[int], live: Iterable[int]
    ) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
        """The shards of ``blacklisted`` places move for good onto the least-loaded ``live``
        workers: (worker -> the shards it receives, worker -> those it must load). A shard a
        receiver keeps already becomes its own, with no load; the caller releases the other
        kept copies. ({}, {}) when no such place owns any."""
        move = migrate(self.owners, blacklisted, live)
        if move is None:
            return {}, {}
        self.owners = move.owners
        load = {}
        for w, sids in move.plan.items():
            have = {s for s in sids if self.kept.get(s) == w}  # encoded there by a recovery
            for s in have:
                del self.kept[s]
            load[w] = [s for s in sids if s not in have]
        return move.plan, load

    def move(self, shard: int, src: int, dst: int) -> None:
        """Rebalancing: ``shard`` moves from place ``src`` to place ``dst``."""
        self.owners[src] = [x for x in self.owners[src] if x != shard]
        self.owners[dst] = sorted([*self.owners[dst], shard])

    # -- invariants ------------------------------------------------------------------------
    def check(self) -> None:
        """Raise PlacementBroken unless: every shard is the driver's or one place's, once; each
        place's shards are in id order; every kept shard is a place's (not the driver's), and
        not kept by that place itself."""
        seen: dict[int, str] = {s: "the driver" for s in self.here}
        for w, ss in self.owners.items():
            if list(ss) != sorted(set(ss)):
                raise PlacementBroken(f"place {w}'s shards are not in id order once each: {ss}")
            for s in ss:
                if s in seen:
                    raise PlacementBroken(f"shard {s} is owned by {seen[s]} and by place {w}")
                seen[s] = f"place {w}"
        if sorted(seen) != list(range(self.num_shards)):
            missing = sorted(set(range(self.num_shards)) - set(seen))
            raise PlacementBroken(f"shards {missing} are owned by nobody")
        place = self.place_of()
        for s, h in self.kept.items():
            if s not in place:
                raise PlacementBroken(f"shard {s} is kept by {h} but no place owns it")
            if place[s] == h:
                raise PlacementBroken(f"shard {s} is kept by its own place {h}")
