"""Reconfiguration decisions between rounds, as plain functions over plain data.

The driver asks these and carries out the answers over MPI: whether the original ranks'
communicator must shrink and how, how survivors are renumbered, why a place is
blacklisted, and where a blacklisted place's shards go for good. The simulation
(:mod:`mixle_mpi.policy.simulation`) asks the same functions.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from itertools import repeat
from typing import NamedTuple

from mixle_mpi.policy.placement import spread

ULFM, EMULATED = "ulfm", "emulated"


def shrink_needed(failed: Iterable[int], original: Mapping[int, int]) -> bool:
    """Only a failure among the original ranks changes their communicator (a respawned
    worker has its own intercommunicator with the driver)."""
    return any(w in original for w in failed)


def shrink_method(configured: str, started: bool, ulfm_reports_failed: bool) -> tuple[str, str | None]:
    """(method, why it fell back to the emulation, or None).

    ULFM's ``Shrink`` waits for good for a member the library does not know to be dead (one
    fenced but alive elsewhere, or one that exited without a signal), and was measured to
    hang after a death inside the startup collectives; the emulation needs neither."""
    if configured == EMULATED:
        return EMULATED, None
    if not started:
        return EMULATED, "a rank failed while the job started; emulating the shrink"
    if not ulfm_reports_failed:
        return EMULATED, "ULFM does not report these ranks failed; emulating the shrink"
    return ULFM, None


def renumber(survivors: Iterable[int]) -> dict[int, int]:
    """Worker id -> rank in the shrunk communicator: the driver is 0, survivors keep their order."""
    return {w: i + 1 for i, w in enumerate(sorted(survivors))}


def blacklist_cause(failures: int, max_retries: int, respawn_setting: bool) -> str:
    """Why a failed place is blacklisted, for the event log."""
    if failures >= max_retries:
        return f"max_retries={max_retries} reached"
    if not respawn_setting:
        return "respawn disabled (respawn=False): shards migrate to survivors"
    return "respawn unavailable (spawning failed): shards migrate to survivors"


def migration(owners: Mapping[int, list[int]], blacklisted: Iterable[int],
              live: Iterable[int]) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """(new owners, worker -> shards it receives): the shards of blacklisted places move for
    good onto the least-loaded live workers. Raises ValueError when there is none."""
    gone = set(blacklisted)
    homeless = sorted(s for w in gone if w in owners for s in owners[w])
    new = {w: ([] if w in gone else sorted(ss)) for w, ss in owners.items()}
    if not homeless:
        return new, {}
    live = list(live)  # (spread's answer does not depend on their order)
    plan = spread(homeless, dict(zip(live, map(len, map(new.get, live, repeat([], len(live)))))))
    for w, sids in plan.items():
        new[w] = sorted(new.get(w, []) + sids)
    return new, plan


# -- the actions of one reconfiguration pass, in the order the driver carries them out -----
class ShrinkComm(NamedTuple):
    """Rebuild the original ranks' communicator without the failed ones."""


class Respawn(NamedTuple):
    """Start a replacement process for ``worker``; it gets the same shards back."""
    worker: int


class Adopt(NamedTuple):
    """The process of idle ``spare`` takes failed ``worker``'s place (same shards, next
    incarnation): no Spawn, and the spare was set up and beating already."""
    worker: int
    spare: int


class Blacklist(NamedTuple):
    """``worker``'s place is given up for good; its shards migrate."""
    worker: int
    cause: str


class Migrate(NamedTuple):
    """Shards of blacklisted places move for good: the new ``owners``, and ``plan`` (worker ->
    shards it receives and must load)."""
    owners: dict
    plan: dict


SPARE_LOST = "a spare (it held no shards): not replaced"


def idle_places(owners: Mapping[int, list[int]], live: Iterable[int]) -> list[int]:
    """Live places that hold no shard: the spares, lowest id first."""
    return sorted(w for w in live if not owners.get(w))


def plan(failed: Iterable[int], original: Mapping[int, int], membership, can_spawn: bool,
         respawn_setting: bool, owners: Mapping[int, list[int]] | None = None, spares: Iterable[int] = ()) -> list:
    """What to do about ``failed`` workers between rounds: ``ShrinkComm`` if one was an
    original rank; then, for each place below ``max_retries``, an ``Adopt`` by the next idle
    spare, else a ``Respawn`` when spawning works; a ``Blacklist`` for the rest. A failed
    place that held no shards (a spare) is given up (``SPARE_LOST``). A respawn that fails
    becomes :func:`respawn_failed`'s ``Blacklist``, carried out after these."""
    failed = sorted(failed)
    gone = set(failed)
    pool = deque(s for s in sorted(spares) if s not in gone)
    actions: list = [ShrinkComm()] if shrink_needed(failed, original) else []
    decision = membership.decide(failed, can_spawn or bool(pool))
    later: list = []
    for w in decision.respawn:
        if owners is not None and not owners.get(w):
            later.append(Blacklist(w, SPARE_LOST))
        elif pool:
            actions.append(Adopt(w, pool.popleft()))
        elif can_spawn:
            actions.append(Respawn(w))
        else:
            later.append(blacklisting(membership, w, respawn_setting))
    actions += later + [blacklisting(membership, w, respawn_setting) for w in decision.blacklist]
    return actions


def blacklisting(membership, worker: int, respawn_setting: bool) -> Blacklist:
    """The ``Blacklist`` action for ``worker``, with its cause."""
    return Blacklist(worker, blacklist_cause(membership.records[worker].failures, membership.max_retries,
                                             respawn_setting))


def respawn_failed(membership, worker: int, respawn_setting: bool) -> Blacklist:
    """A respawn that could not be carried out (spawning failed): the place is blacklisted."""
    return blacklisting(membership, worker, respawn_setting)


def migrate(owners: Mapping[int, list[int]], blacklisted: Iterable[int], live: Iterable[int]) -> Migrate | None:
    """The ``Migrate`` action, or None when no blacklisted place holds a shard."""
    gone = set(blacklisted)
    if not any(owners.get(w) for w in gone):
        return None
    new, moves = migration(owners, gone, live)
    return Migrate(new, moves)


def spawn_timeout_is_fatal(vendor: str) -> bool:
    """Whether the job must end when a Spawn overran its deadline. Measured under MPICH: a
    replacement killed while it was being spawned leaves ``MPI_Comm_spawn`` spinning with
    MPICH's global lock held, and every later MPI call of the driver waits for good. Open MPI
    reports the death and the driver goes on (the shards migrate)."""
    return vendor == "MPICH"
