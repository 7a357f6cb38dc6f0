"""A replacement joins in the background, and survivors carry its place's shards meanwhile.

A respawned worker spends seconds importing mixle and loading its shards. Rounds do not wait
for it (issue 11): its place stays out of the live set until it is set up and holds its
shards, and the survivors that recomputed the place's orphans keep them encoded (``kept``)
and compute them as their own work in the next rounds. Once the replacement has loaded
everything, it takes its shards back at a round boundary and the survivors drop their
copies. Who computes a shard never changes its bits (each shard alone, folded in id order).

Pure: the driver feeds it what arrived and carries out what it says (tests/test_unit_joining.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass
class Join:
    """One replacement on its way in: set up (``ready``), then its shards' blocks sent
    (``parts`` left to send) and encoded (``loading``: shards whose ``Loaded`` is awaited)."""

    worker: int
    started: float  # monotonic time the replacement was spawned
    ready: bool = False
    parts: list = field(default_factory=list)
    loading: set = field(default_factory=set)
    since: float = 0.0  # monotonic time of its last step forward
    pid: int | None = None  # its process, when on the driver's host (its end is seen at once)

    def __post_init__(self) -> None:
        self.since = self.since or self.started

    def got_ready(self, parts: list, now: float) -> None:
        """It answered ``Ready``: its shards' blocks (shard, start, stop, last) go next."""
        self.ready, self.parts, self.since = True, list(parts), now

    def next_part(self, now: float):
        """The next block to send (and note its shard's ``Loaded`` is due after its last block)."""
        part = self.parts.pop(0)
        if part[3]:
            self.loading.add(part[0])
        self.since = now
        return part

    def got_loaded(self, shard: int, now: float) -> None:
        self.loading.discard(shard)
        self.since = now

    def joined(self) -> bool:
        """Set up and holding every shard of its place: it may take them back."""
        return self.ready and not self.parts and not self.loading

    def stalled(self, now: float, timeout: float) -> bool:
        """No step forward for ``timeout`` seconds while one is awaited from it: hung (it is
        failed like any hung worker). One that holds every shard awaits the next round
        boundary, however long the round takes: nothing is awaited from it (its heartbeats
        still tell whether it lives)."""
        return not self.joined() and now - self.since > timeout


def work_of(
    owners: Mapping[int, Iterable[int]], kept: Mapping[int, int], live: Iterable[int]
) -> dict[int, list[int]]:
    """Each live worker's resident work for a round (pure): its place's shards, plus the
    shards it keeps for a place that is not live (a replacement still joining), in id order."""
    live = set(live)
    out = {w: list(owners.get(w, ())) for w in live}
    for w, sids in owners.items():
        if w in live:
            continue
        for s in sids:
            holder = kept.get(s)
            if holder in live:
                out[holder].append(s)
    return {w: sorted(ss) for w, ss in out.items()}


def release_plan(kept: Mapping[int, int], shards: Iterable[int]) -> dict[int, list[int]]:
    """Who drops which kept copy once ``shards`` are resident at their owner again (pure)."""
    plan: dict[int, list[int]] = {}
    for s in sorted(shards):
        holder = kept.get(s)
        if holder is not None:
            plan.setdefault(holder, []).append(s)
    return plan
