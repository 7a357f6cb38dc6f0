"""Shard placement and recovery planning: pure functions over ids.

Placement never changes the fitted bits (each shard is computed alone and the fold is in
shard-id order); it only decides where work runs, so it aims for balance and stability.
"""

from __future__ import annotations

import heapq
from itertools import repeat
from collections.abc import Iterable, Mapping


def initial_placement(num_shards: int, workers: Iterable[int]) -> dict[int, list[int]]:
    """Shard s goes to the (s mod W)-th worker: shard i on worker i when S == W."""
    ws = sorted(workers)
    if not ws:
        raise ValueError("initial_placement needs at least one worker")
    owners: dict[int, list[int]] = {w: [] for w in ws}
    for s in range(num_shards):
        owners[ws[s % len(ws)]].append(s)
    return owners


def spread(shards: Iterable[int], load: Mapping[int, int]) -> dict[int, list[int]]:
    """Give each shard, in id order, to the least-loaded candidate (ties: lowest id).

    ``load`` maps every candidate worker to the number of shards it already holds; the
    result maps each chosen worker to the shards it receives (id-ordered).
    """
    if not load:
        raise ValueError("no candidate workers to place shards on")
    # A heap of (load, worker): its top is exactly min(load, key=(load, id)), since worker
    # ids are distinct, so each shard costs O(log W) instead of a scan of every candidate.
    heap = list(zip(load.values(), load))
    heapq.heapify(heap)
    plan: dict[int, list[int]] = {}
    for s in sorted(shards):
        n, target = heap[0]
        plan.setdefault(target, []).append(s)
        heapq.heapreplace(heap, (n + 1, target))
    return plan


def plan_recovery(orphans: Iterable[int], owners: Mapping[int, list[int]], survivors: Iterable[int]) -> dict[int, list[int]]:
    """Which survivor recomputes which orphaned shard this round, balancing by resident load."""
    live = list(survivors)  # (spread's answer does not depend on their order)
    return spread(orphans, dict(zip(live, map(len, map(owners.get, live, repeat((), len(live)))))))
