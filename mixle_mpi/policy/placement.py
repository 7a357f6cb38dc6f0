"""Shard placement and recovery planning: pure functions over ids.

Placement never changes the fitted bits (each shard is computed alone and the fold is in
shard-id order); it only decides where work runs, so it aims for balance and stability.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from itertools import repeat


def initial_placement(
    num_shards: int, workers: Iterable[int], skip: Iterable[int] = ()
) -> dict[int, list[int]]:
    """Shard s goes to the (s mod W)-th worker: shard i on worker i when S == W. ``skip``:
    shards no worker holds (the driver's own, ``driver_share``); the others are dealt
    round-robin in id order all the same."""
    ws = sorted(workers)
    if not ws:
        raise ValueError("initial_placement needs at least one worker")
    skip = set(skip)
    owners: dict[int, list[int]] = {w: [] for w in ws}
    for i, s in enumerate(s for s in range(num_shards) if s not in skip):
        owners[ws[i % len(ws)]].append(s)
    return owners


def driver_share(
    num_shards: int,
    workers: int,
    on: bool,
    shard_bytes: Callable[[int], int] | None = None,
    max_bytes: int | None = None,
) -> list[int]:
    """The shards the driver computes itself (setting ``driver_computes``): a worker's
    share, S // (W + 1), none when off or when their stored bytes (``shard_bytes(s)``)
    add up to more than ``max_bytes``. The lowest ids: the fold takes them first, so the
    driver has folded them by the time the workers reply. No worker holds them, so no
    failure orphans them; a successor driver (failover) computes its own share again."""
    share = list(range(num_shards // (workers + 1))) if on and workers > 0 else []
    if (
        max_bytes is not None
        and shard_bytes is not None
        and sum(map(shard_bytes, share)) > max_bytes
    ):
        return []
    return share


def spread(shards: Iterable[int], load: Mapping[int, int]) -> dict[int, list[int]]:
    """Give each shard, in id order, to the least-loaded candidate (ties: lowest id).

    ``load`` maps every candidate worker to the number of shards it already holds; the
    result maps each chosen worker to the shards it receives (id-ordered).
    """
    if not load:
        raise ValueError("no candidate workers to place shards on")
    # A heap of (load, worker): its top is exactly min(load, key=(load, id)), since worker
    # ids are distinct, so each shard costs O(log W) instead of a scan of every candidate.
    heap = list(zip(load.values(), load, strict=True))
    heapq.heapify(heap)
    plan: dict[int, list[int]] = {}
    for s in sorted(shards):
        n, target = heap[0]
        plan.setdefault(target, []).append(s)
        heapq.heapreplace(heap, (n + 1, target))
    return plan


def plan_recovery(
    orphans: Iterable[int], owners: Mapping[int, list[int]], survivors: Iterable[int]
) -> dict[int, list[int]]:
    """Which survivor recomputes which orphaned shard this round, balancing by resident load."""
    live = list(survivors)  # (spread's answer does not depend on their order)
    return spread(
        orphans,
        dict(zip(live, map(len, map(owners.get, live, repeat((), len(live)))), strict=False)),
    )


OWN_READ_MIN_BYTES = (
    8 << 20
)  # below this a worker's shards come faster from the driver (bench/results/startup_scale.md)


def own_readers(
    loads: Mapping[int, int], can_read: Iterable[int], min_bytes: int = OWN_READ_MIN_BYTES
) -> set[int]:
    """The workers that read their own shards from the store: those that can open it and
    have at least ``min_bytes`` to load (``loads``: worker -> stored bytes of its shards).
    Opening the store costs each worker a fixed time; streaming costs the driver per byte,
    one worker after another."""
    readers = set(can_read)
    return {w for w, size in loads.items() if w in readers and size >= min_bytes}


# Variables by which a batch system says how many hosts the job was given (any more than
# one: MPI may place a replacement on one this job's ranks do not use yet).
ALLOCATION_HOSTS = ("SLURM_JOB_NUM_NODES", "SLURM_NNODES", "PBS_NUM_NODES", "NHOSTS")


def replacement_here(
    host: str | None, live_hosts: Iterable[str], driver_host: str, env: Mapping[str, str]
) -> bool:
    """Whether a replacement spawned for ``host`` (``respawn_host``) surely starts on the
    driver's host, where the driver sees its process appear (runtime/birth.py): named so, or
    left to MPI in a job whose ranks and allocation are all on that one host."""
    if host is not None:
        return host == driver_host
    if any(h != driver_host for h in live_hosts):
        return False
    for name in ALLOCATION_HOSTS:
        try:
            if int(env.get(name, "1")) > 1:
                return False
        except ValueError:
            return False
    return True


def respawn_host(
    failed_host: str | None,
    live_hosts: Iterable[str],
    driver_host: str,
    avoid: Iterable[str] = (),
) -> str | None:
    """Where a failed worker's replacement starts, when the job spans several hosts: back on
    its own host while that host still runs a live worker (it is up: the process died, not
    the machine), else on the host with the fewest live workers (ties: by name). Never on a
    host in ``avoid`` (one whose process computed other bits: a replacement there would be
    refused too) while another is known. None on one host, or with nothing known: MPI's own
    mapping then places it."""
    hosts = list(live_hosts)
    if len(set(hosts) | {driver_host}) < 2:
        return None
    shunned = set(avoid)
    if failed_host in hosts and failed_host not in shunned:
        return failed_host
    counts: dict[str, int] = {}
    for h in hosts:
        if h not in shunned:
            counts[h] = counts.get(h, 0) + 1
    return min(counts, key=lambda h: (counts[h], h)) if counts else None
