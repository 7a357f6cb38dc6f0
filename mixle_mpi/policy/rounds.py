"""One round's decisions as plain data: who computes which shard, which reply counts, what
is orphaned, and what the driver must do next.

The driver feeds it what happened (a task was sent, a result arrived, a worker failed) and
carries out what :meth:`RoundState.next_step` returns; no MPI here, so every order of
events and every failure set can be tested (tests/test_unit_rounds.py) and simulated
(:mod:`mixle_mpi.policy.simulation`). Exactness rests on three rules kept here:

- a shard's result is accepted only from the process it is assigned to *now* (worker id
  and incarnation), and only once: a late reply of a fenced or replaced process is dropped;
- a shard whose assignee is no longer that live process is an orphan and is recomputed;
- the fold happens elsewhere, in shard-id order, over exactly one accepted result per shard.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mixle_mpi.policy.placement import plan_recovery

Process = tuple[int, int]  # (worker id, incarnation): one process holding a worker place


@dataclass(frozen=True)
class Wait:
    """Every missing shard is assigned to a live process: wait for replies or failures."""


@dataclass(frozen=True)
class Recover:
    """Send these orphaned shards (worker -> shards, with their rows) to survivors."""
    plan: dict[int, list[int]]


@dataclass(frozen=True)
class NeedWorkers:
    """Orphans but no live worker: reconfigure (respawn) first; if none comes back, fail."""
    orphans: list[int]


@dataclass(frozen=True)
class Done:
    """Every shard has exactly one accepted result."""


Step = Wait | Recover | NeedWorkers | Done


@dataclass
class RoundState:
    num_shards: int
    preloaded: frozenset = frozenset()   # results already known (a fold journal)
    assigned: dict[int, Process] = field(default_factory=dict)
    accepted: set = field(default_factory=set)
    recomputed: set = field(default_factory=set)

    def __post_init__(self) -> None:
        self.preloaded = frozenset(self.preloaded)
        self.accepted = set(self.preloaded)

    # -- what the driver tells it ----------------------------------------------------------
    def own_work(self, owners: Mapping[int, Iterable[int]], live: Mapping[int, int]) -> dict[int, list[int]]:
        """The first dispatch: each live worker's resident shards that are still missing."""
        plan = {w: [s for s in owners.get(w, ()) if s not in self.accepted] for w in sorted(live)}
        return {w: ss for w, ss in plan.items() if ss}

    def sent(self, worker: int, incarnation: int, shards: Iterable[int], recovery: bool = False) -> None:
        """A task for ``shards`` reached ``worker``'s current process (its send did not fail)."""
        for s in shards:
            self.assigned[s] = (worker, incarnation)
            if recovery:
                self.recomputed.add(s)

    def accept(self, worker: int, incarnation: int, shard: int, live: Mapping[int, int]) -> bool:
        """Whether a result for ``shard`` from this process is the one to fold: it is the
        assignee, it is still the live process of its worker (not failed, fenced or
        replaced), and the shard has no result yet."""
        if shard in self.accepted or self.assigned.get(shard) != (worker, incarnation):
            return False
        if live.get(worker) != incarnation:
            return False
        self.accepted.add(shard)
        return True

    # -- what it tells the driver ------------------------------------------------------------
    def orphans(self, live: Mapping[int, int]) -> list[int]:
        """Missing shards whose assignee is not a live process any more (or that have none)."""
        out = []
        for s in range(self.num_shards):
            if s in self.accepted:
                continue
            who = self.assigned.get(s)
            if who is None or live.get(who[0]) != who[1]:
                out.append(s)
        return out

    def next_step(self, owners: Mapping[int, list[int]], live: Mapping[int, int]) -> Step:
        """``live`` maps each live worker to its current incarnation."""
        if len(self.accepted) >= self.num_shards:
            return Done()
        orphans = self.orphans(live)
        if not orphans:
            return Wait()
        if not live:
            return NeedWorkers(orphans)
        return Recover(plan_recovery(orphans, owners, live))

    @property
    def reused(self) -> list[int]:
        """Accepted from the resident owner: neither recomputed nor preloaded."""
        return sorted(self.accepted - self.recomputed - self.preloaded)
