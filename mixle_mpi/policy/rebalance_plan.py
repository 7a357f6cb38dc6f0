"""Speed-aware placement between rounds (pure): a worker that stays slow gives shards to
faster ones, and gets them back when it recovers.

Within a round, speculation (policy/speculation_plan.py) copies a straggler's tail once
others are idle; that always comes late by the time it takes to notice. When the slowness
lasts, the better answer is to give the slow worker fewer shards: the placement that ends a
round soonest gives each worker shards in proportion to its speed (``target``). Shards are
whole, so it is the greedy makespan placement: each shard goes where it ends soonest.

Moving shards costs a load between rounds, and paces are noisy, so placement changes only
when it pays and keeps paying (hysteresis): the target must end a round at least ``GAIN``
sooner than the current placement, by the measured paces, in ``ROUNDS`` rounds in a row.
The same rule moves shards back once the slow worker's pace recovers, and never moves them
for a scatter of paces below ``GAIN``, or below ``spread`` (paces within that factor of the
median count as equal: on a host with more ranks than cores, a rank that shares a core
looks slower without being so). Each worker keeps at least one shard, so its pace
stays measured. Where a shard is computed never changes its bits.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median

GAIN = 0.2  # the target must end a round at least this much sooner (a fraction) ...
ROUNDS = 3  # ... in this many rounds in a row, before shards move


def round_time(counts: Mapping[int, int], paces: Mapping[int, float]) -> float:
    """When a round of this placement ends: its slowest worker's shards times its pace."""
    return max((counts[w] * paces[w] for w in counts), default=0.0)


def target(total: int, paces: Mapping[int, float]) -> dict[int, int]:
    """Shards per worker that end a round soonest, at least one each (greedy: each next
    shard goes to the worker that would end it soonest; ties to the lower id)."""
    workers = sorted(paces)
    if not workers:
        return {}
    counts = {w: 1 for w in workers}
    heap = [(2 * paces[w], w) for w in workers]
    heapq.heapify(heap)
    for _ in range(total - len(workers)):
        _, w = heapq.heappop(heap)
        counts[w] += 1
        heapq.heappush(heap, ((counts[w] + 1) * paces[w], w))
    return counts


def moves(
    owners: Mapping[int, Sequence[int]], goal: Mapping[int, int]
) -> dict[int, tuple[int, int]]:
    """shard -> (from, to): the fewest moves from ``owners`` to the counts of ``goal``; a
    worker with too many gives its highest shard ids, the one short of most receives first."""
    give = []
    for w in sorted(owners):
        extra = len(owners[w]) - goal.get(w, len(owners[w]))
        give += [(s, w) for s in sorted(owners[w])[len(owners[w]) - extra :]] if extra > 0 else []
    short = {w: goal[w] - len(owners[w]) for w in goal if goal[w] > len(owners[w])}
    out = {}
    for s, w in sorted(give):
        to = max(sorted(short), key=lambda x: short[x])
        out[s] = (w, to)
        short[to] -= 1
        if not short[to]:
            del short[to]
    return out


@dataclass
class Rebalancer:
    """Decides, after each round, whether shards move (see the module's rule)."""

    gain: float = GAIN
    rounds: int = ROUNDS
    streak: int = 0
    last_goal: dict = field(default_factory=dict)

    def plan(
        self,
        owners: Mapping[int, Sequence[int]],
        paces: Mapping[int, float | None],
        spread: float = 1.0,
    ) -> dict[int, tuple[int, int]]:
        """``owners``: each live worker holding shards -> its shards; ``paces``: its seconds
        per shard (None: unknown, taken as the median); paces within ``spread`` times the
        median count as the median. Returns the moves to make now."""
        known = [p for w, p in paces.items() if w in owners and p]
        if len(owners) < 2 or not known:
            self.streak = 0
            return {}
        mid = median(known)
        pace = {w: (paces.get(w) or mid) for w in owners}
        pace = {w: mid if mid / spread <= p <= mid * spread else p for w, p in pace.items()}
        now = {w: len(ss) for w, ss in owners.items()}
        goal = target(sum(now.values()), pace)
        if round_time(now, pace) <= (1 + self.gain) * round_time(goal, pace):
            self.streak = 0
            return {}
        self.streak += 1
        if self.streak < self.rounds:
            return {}
        self.streak = 0
        self.last_goal = goal
        return moves(owners, goal)
