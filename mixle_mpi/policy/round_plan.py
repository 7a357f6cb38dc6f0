"""One round's decisions as plain data: who computes which shard, which reply counts, what
is orphaned, and what the driver must do next.

The driver feeds it what happened (a task was sent, a result arrived, a worker failed) and
carries out what :meth:`RoundState.next_step` returns; no MPI here, so every order of
events and every failure set can be tested (tests/test_unit_rounds.py) and simulated
(:mod:`mixle_mpi.sim`, with the real driver). Exactness rests on three rules kept here:

- a shard's result is accepted only from the process it is assigned to *now* (worker id
  and incarnation), and only once: a late reply of a fenced or replaced process is dropped;
- a shard whose assignee is no longer that live process is an orphan and is recomputed;
- the fold happens elsewhere, in shard-id order, over exactly one E-step payload per shard.

A straggler's outstanding shards may also be *copied* to idle workers
(policy/speculation_plan.py): a copy holder's result is accepted like the assignee's, the
first of them wins, and a shard is an orphan only once none of its holders is live.

A task that also scores may send a shard's E-step payload ahead of its result
(``protocol.Stats``), to be folded while the scores are computed. Such a payload is taken
on the first rule's terms, once per shard (:meth:`RoundState.take_stats`); a result from
another process after a failure is then not folded again (:meth:`RoundState.fold_once`).
Any process's payload for a shard is the same bits: it is computed from the same rows and
the same pickled model, which is what recomputing an orphan relies on already.
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
    preloaded: frozenset = frozenset()  # results already known (a fold journal)
    here: frozenset = frozenset()  # shards the driver computes itself (driver_computes)
    assigned: dict[int, Process] = field(default_factory=dict)
    accepted: set = field(default_factory=set)
    recomputed: set = field(default_factory=set)
    folded: set = field(default_factory=set)  # shards whose E-step payload went to the fold
    copies: dict = field(
        default_factory=dict
    )  # shard -> the processes computing a speculative copy
    won: dict = field(default_factory=dict)  # shard -> the copy holder whose result was accepted

    def __post_init__(self) -> None:
        self.preloaded = frozenset(self.preloaded)
        self.here = frozenset(self.here) - self.preloaded
        self.accepted = set(self.preloaded)
        # Indexes kept alongside ``assigned`` so that finding orphans costs O(processes +
        # orphans), not O(shards), per event: each process's shards that are still assigned
        # to it (accepted ones leave on ``accept``), and the shards never sent (built at the
        # first ``orphans`` call). Both are only candidate sets: ``orphans`` still checks
        # ``accepted``, the ground truth, so the answer is the full scan's, shard for shard.
        self._by_process: dict[Process, set] = {}
        for s, who in self.assigned.items():
            self._by_process.setdefault(who, set()).add(s)
        self._unsent: set | None = None

    # -- what the driver tells it ----------------------------------------------------------
    def own_work(
        self, owners: Mapping[int, Iterable[int]], live: Mapping[int, int]
    ) -> dict[int, list[int]]:
        """The first dispatch: each live worker's resident shards that are still missing."""
        plan = {w: [s for s in owners.get(w, ()) if s not in self.accepted] for w in sorted(live)}
        return {w: ss for w, ss in plan.items() if ss}

    def done_here(self, shard: int) -> None:
        """The driver computed ``shard``, one of ``here``, itself: accepted. Those shards are
        never assigned to a worker and never orphans, done or not."""
        if shard not in self.here:
            raise ValueError(f"shard {shard} is not the driver's to compute in this round")
        self.accepted.add(shard)

    def sent(
        self,
        worker: int,
        incarnation: int,
        shards: Iterable[int],
        recovery: bool = False,
        copy: bool = False,
    ) -> None:
        """A task for ``shards`` reached ``worker``'s current process (its send did not fail);
        ``copy``: speculative copies, the assignees keep their shards."""
        who = (worker, incarnation)
        mine = self._by_process.setdefault(who, set())
        if copy:
            for s in shards:
                if s not in self.accepted and self.assigned.get(s) not in (None, who):
                    self.copies.setdefault(s, set()).add(who)
                    mine.add(s)
            if not mine:
                del self._by_process[who]
            return
        for s in shards:
            before = self.assigned.get(s)
            if before is not None and before != who:
                self._drop(before, s)
            self.assigned[s] = who
            self.copies.get(s, set()).discard(who)
            mine.add(s)
            if self._unsent is not None:
                self._unsent.discard(s)
            if recovery:
                self.recomputed.add(s)
        if not mine:
            del self._by_process[who]

    def _drop(self, who: Process, shard: int) -> None:
        ss = self._by_process.get(who)
        if ss is not None:
            ss.discard(shard)
            if not ss:
                del self._by_process[who]

    def accept(self, worker: int, incarnation: int, shard: int, live: Mapping[int, int]) -> bool:
        """Whether a result for ``shard`` from this process is the one to fold: it is the
        assignee, it is still the live process of its worker (not failed, fenced or
        replaced), and the shard has no result yet."""
        if shard in self.accepted or not self._holds(worker, incarnation, shard, live):
            return False
        self.accepted.add(shard)
        if self.assigned.get(shard) != (worker, incarnation):
            self.won[shard] = (worker, incarnation)
        for who in self.holders(shard):
            self._drop(who, shard)
        return True

    def _holds(self, worker: int, incarnation: int, shard: int, live: Mapping[int, int]) -> bool:
        """This process is the shard's assignee or computes a copy of it, and is live."""
        who = (worker, incarnation)
        if self.assigned.get(shard) != who and who not in self.copies.get(shard, ()):
            return False
        return live.get(worker) == incarnation

    def holders(self, shard: int) -> set:
        """Every process computing ``shard`` this round: its assignee and its copies' holders."""
        out = set(self.copies.get(shard, ()))
        if shard in self.assigned:
            out.add(self.assigned[shard])
        return out

    def take_stats(
        self, worker: int, incarnation: int, shard: int, live: Mapping[int, int]
    ) -> bool:
        """Whether a payload sent ahead of ``shard``'s result (``protocol.Stats``) is to be
        folded now: it comes from the shard's assignee while it is live, as ``accept`` asks
        of a result, and no payload of the shard was folded yet. The shard is not accepted:
        its result (the scores) is still to come, from this process or, should it fail, from
        the one that recomputes the shard."""
        if shard in self.accepted or not self._holds(worker, incarnation, shard, live):
            return False
        return self.fold_once(shard)

    def fold_once(self, shard: int) -> bool:
        """True the first time only: whether ``shard``'s payload is the one to fold (a payload
        sent ahead, the driver's own, or that of an accepted result)."""
        if shard in self.folded:
            return False
        self.folded.add(shard)
        return True

    # -- what it tells the driver ------------------------------------------------------------
    def orphans(self, live: Mapping[int, int]) -> list[int]:
        """Missing shards whose assignee is not a live process any more (or that have none)."""
        accepted, n = self.accepted, self.num_shards
        if self._unsent is None:
            self._unsent = {
                s
                for s in range(n)
                if s not in self.assigned and s not in accepted and s not in self.here
            }
        elif self._unsent:
            self._unsent = {s for s in self._unsent if s not in accepted}
        found = set(self._unsent)
        for who in [p for p in self._by_process if live.get(p[0]) != p[1]]:
            for s in list(self._by_process.get(who, ())):
                if s in accepted or not 0 <= s < n:
                    continue
                if self.assigned.get(s) != who:  # a dead copy's holder: the assignee goes on
                    self.copies[s].discard(who)
                    self._drop(who, s)
                    continue
                alive = sorted(c for c in self.copies.get(s, ()) if live.get(c[0]) == c[1])
                if not alive:
                    found.add(s)
                    continue
                self.copies[s].discard(alive[0])  # a live copy's holder becomes the assignee
                self.assigned[s] = alive[0]
                self._drop(who, s)
        return sorted(found)

    def outstanding(self, live: Mapping[int, int]) -> dict[int, list[int]]:
        """Each live worker's own shards (it is their assignee) not replied yet."""
        out: dict[int, list[int]] = {}
        for who, ss in self._by_process.items():
            if live.get(who[0]) != who[1]:
                continue
            mine = [s for s in ss if self.assigned.get(s) == who and s not in self.accepted]
            if mine:
                out.setdefault(who[0], []).extend(mine)
        return out

    def idle(self, live: Mapping[int, int]) -> list[int]:
        """The live workers with nothing of this round left to reply."""
        busy = {w for w, _ in self._by_process}
        return sorted(w for w in live if w not in busy)

    def waiting_on(self) -> list[int]:
        """The workers with a shard assigned and not yet accepted, whose replies the round
        waits for (O(processes), from the index; a failed one is among them until its
        shards are sent elsewhere)."""
        return sorted({w for w, _ in self._by_process})

    def done(self) -> bool:
        """Every shard has an accepted result (what ``next_step`` checks first)."""
        return len(self.accepted) >= self.num_shards

    def next_step(self, owners: Mapping[int, list[int]], live: Mapping[int, int]) -> Step:
        """``live`` maps each live worker to its current incarnation.

        After a ``Wait``, as long as nothing was sent and ``live`` has not changed, the
        answer can only be ``Wait`` or ``Done`` (an accepted reply makes no orphan): a caller
        may then ask :meth:`done` alone, in O(1), instead of this O(processes)."""
        if self.done():
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
