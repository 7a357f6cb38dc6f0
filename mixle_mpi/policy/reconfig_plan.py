"""Reconfiguration decisions between rounds, as plain functions over plain data.

The driver asks these and carries out the answers over MPI: how the job continues after a
failure (:func:`choose_method`), whether the original ranks' communicator must shrink and
how, how survivors are renumbered, why a place is blacklisted, and where a blacklisted
place's shards go for good. The simulation (:mod:`mixle_mpi.sim`) runs the driver that asks
them.

Three ways to continue once an original rank failed (docs/user-guide.md "Three ways to continue"):

- ``ULFM``: Open MPI's real ``Comm.Shrink`` (``mpiexec --with-ft ulfm``);
- ``EMULATED``: ``Intracomm.Create_from_group`` over the agreed survivors (MPICH, or Open
  MPI where ULFM does not report the failure);
- ``KEEP``: no new communicator at all. The driver keeps the original one and never
  addresses the dead rank again; survivors keep their ranks. This needs nothing from the
  library but point-to-point messages between the driver and each live worker, which is all
  the star topology uses, so it works where neither of the others does: ranks started by
  ``srun`` through SLURM's PMIx plugin (no PMIx groups, no ULFM).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from itertools import repeat
from typing import NamedTuple

from mixle_mpi.core.errors import ConfigError
from mixle_mpi.policy.placement import spread

ULFM, EMULATED, KEEP = "ulfm", "emulated", "keep"
METHODS = (ULFM, EMULATED, KEEP)
AUTO = "auto"
CONTINUATION_ENV = "MIXLE_MPI_CONTINUATION"  # auto (default) or one of METHODS


def requested_method(environ: Mapping[str, str]) -> str:
    """``MIXLE_MPI_CONTINUATION``: ``auto`` (the default) or one of :data:`METHODS`."""
    raw = (environ.get(CONTINUATION_ENV) or AUTO).strip().lower()
    if raw not in (AUTO, *METHODS):
        raise ConfigError(
            f"{CONTINUATION_ENV}={raw!r} is not a continuation method; valid values are "
            f"{', '.join((AUTO, *METHODS))}"
        )
    return raw


def srun_plugin(environ: Mapping[str, str]) -> str | None:
    """``"pmix"`` or ``"pmi2"`` when this rank was started directly by ``srun`` through SLURM's
    own MPI plugin, else None (``mpiexec``, also inside an allocation, or a singleton).

    SLURM's pmix plugin names its namespace ``slurm.pmix.<job>.<step>`` (Open MPI's mpiexec:
    ``prterun-...``); its pmi2 plugin sets ``PMI_JOBID`` and ``SLURM_MPI_TYPE=pmi2``. MPICH's
    Hydra inside an allocation starts its proxies with srun, so under a site's
    ``MpiDefault=pmi2`` its ranks inherit both, but Hydra also sets ``PMI_HOSTNAME`` (measured)."""
    if environ.get("PMIX_NAMESPACE", "").startswith("slurm.pmix."):
        return "pmix"
    if (
        environ.get("SLURM_MPI_TYPE", "").startswith("pmi2")
        and environ.get("PMI_JOBID")
        and not environ.get("PMI_HOSTNAME")
    ):
        return "pmi2"
    return None


def detach_from_pmix(vendor: str, plugin: str | None) -> bool:
    """Whether every rank must leave SLURM's PMIx server once the job's communicators exist.

    Measured (SLURM 22.05, Open MPI 5.0.11): when a task's PMIx connection drops before it
    called ``PMIx_Finalize`` (a SIGKILLed rank), the pmix plugin's error handler cancels the
    whole step, whatever ``--kill-on-bad-exit`` says. A rank that finalized PMIx first dies
    without that. Point-to-point traffic needs no PMIx once the peers have talked."""
    return vendor == "Open MPI" and plugin == "pmix"


def spawn_unavailable(vendor: str, plugin: str | None) -> str | None:
    """Why ``MPI_Comm_spawn`` must not be tried under this launch, or None."""
    if plugin == "pmix":
        return "srun --mpi=pmix cannot spawn (Spawn fails at once with MPI_ERR_UNKNOWN)"
    if plugin == "pmi2":
        return f"srun --mpi=pmi2: {vendor}'s Spawn waits for room for a new job step (measured to hang)"
    return None


def choose_method(requested: str, ulfm_works: bool, group_works: bool) -> tuple[str, str]:
    """(method, why): ULFM's Shrink where it works, else the ``Create_from_group`` emulation
    where that works, else KEEP, which always works. A requested method is used only where
    it works; one that does not raises ConfigError (it would fail at the first death)."""
    works = {ULFM: ulfm_works, EMULATED: group_works, KEEP: True}
    if requested != AUTO:
        if not works[requested]:
            raise ConfigError(
                f"{CONTINUATION_ENV}={requested} was asked for, but it does not work here "
                f"(ULFM Shrink {'works' if ulfm_works else 'does not work'}, Create_from_group "
                f"{'works' if group_works else 'does not work'}); use auto, or keep"
            )
        return requested, f"{CONTINUATION_ENV}={requested}"
    if ulfm_works:
        return ULFM, "ULFM's Comm.Shrink works"
    if group_works:
        return EMULATED, "no working ULFM Shrink; Create_from_group works"
    return (
        KEEP,
        "neither ULFM's Shrink nor Create_from_group works: keep the communicator, never address the dead",
    )


def shrink_needed(failed: Iterable[int], original: Mapping[int, int]) -> bool:
    """Only a failure among the original ranks changes their communicator (a respawned
    worker has its own intercommunicator with the driver)."""
    return any(w in original for w in failed)


def shrink_method(
    configured: str, started: bool, ulfm_reports_failed: bool
) -> tuple[str, str | None]:
    """(method, why it fell back to the emulation, or None).

    ULFM's ``Shrink`` waits for good for a member the library does not know to be dead (one
    fenced but alive elsewhere, or one that exited without a signal), and was measured to
    hang after a death inside the startup collectives; the emulation needs neither."""
    if configured in (EMULATED, KEEP):
        return configured, None
    if not started:
        return EMULATED, "a rank failed while the job started; emulating the shrink"
    if not ulfm_reports_failed:
        return EMULATED, "ULFM does not report these ranks failed; emulating the shrink"
    return ULFM, None


def renumber(ranks: Mapping[int, int], survivors: Iterable[int]) -> dict[int, int]:
    """Worker id -> rank in the shrunk communicator: the driver is 0, and the survivors keep
    the order of their ``ranks`` before it (ULFM's Shrink and the emulation both keep it).
    That is not always the order of their ids: a spare that adopted a place has the place's
    id and the spare's rank (external campaign, 2026-12-03: a later shrink sent a worker's
    tasks to another process)."""
    return {w: i + 1 for i, w in enumerate(sorted(survivors, key=lambda w: ranks[w]))}


def blacklist_cause(failures: int, max_retries: int, respawn_setting: bool) -> str:
    """Why a failed place is blacklisted, for the event log."""
    if failures >= max_retries:
        return f"max_retries={max_retries} reached"
    if not respawn_setting:
        return "respawn disabled (respawn=False): shards migrate to survivors"
    return "respawn unavailable (spawning failed): shards migrate to survivors"


def migration(
    owners: Mapping[int, list[int]], blacklisted: Iterable[int], live: Iterable[int]
) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """(new owners, worker -> shards it receives): the shards of blacklisted places move for
    good onto the least-loaded live workers. Raises ValueError when there is none."""
    gone = set(blacklisted)
    homeless = sorted(s for w in gone if w in owners for s in owners[w])
    new = {w: ([] if w in gone else sorted(ss)) for w, ss in owners.items()}
    if not homeless:
        return new, {}
    live = list(live)  # (spread's answer does not depend on their order)
    plan = spread(
        homeless, dict(zip(live, map(len, map(new.get, live, repeat([], len(live)))), strict=False))
    )
    for w, sids in plan.items():
        new[w] = sorted(new.get(w, []) + sids)
    return new, plan


# -- the actions of one reconfiguration pass, in the order the driver carries them out -----
class ShrinkComm(NamedTuple):
    """Rebuild the original ranks' communicator without the failed ones."""


class KeepComm(NamedTuple):
    """Keep the original ranks' communicator: ``dropped`` (dead original workers) are never
    addressed again, survivors keep their ranks. No collective, no handshake."""

    dropped: tuple


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


def plan(
    failed: Iterable[int],
    original: Mapping[int, int],
    membership,
    can_spawn: bool,
    respawn_setting: bool,
    owners: Mapping[int, list[int]] | None = None,
    spares: Iterable[int] = (),
    method: str = ULFM,
) -> list:
    """What to do about ``failed`` workers between rounds: if one was an original rank,
    ``ShrinkComm`` (``method`` ULFM or EMULATED) or ``KeepComm`` (KEEP); then, for each place
    below ``max_retries``, an ``Adopt`` by the next idle spare, else a ``Respawn`` when
    spawning works; a ``Blacklist`` for the rest. A failed place that held no shards (a
    spare) is given up (``SPARE_LOST``). A respawn that fails becomes
    :func:`respawn_failed`'s ``Blacklist``, carried out after these."""
    failed = sorted(failed)
    gone = set(failed)
    pool = deque(s for s in sorted(spares) if s not in gone)
    actions: list = []
    if shrink_needed(failed, original):
        actions.append(
            KeepComm(tuple(w for w in failed if w in original)) if method == KEEP else ShrinkComm()
        )
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
    return Blacklist(
        worker,
        blacklist_cause(
            membership.records[worker].failures, membership.max_retries, respawn_setting
        ),
    )


def respawn_failed(membership, worker: int, respawn_setting: bool) -> Blacklist:
    """A respawn that could not be carried out (spawning failed): the place is blacklisted."""
    return blacklisting(membership, worker, respawn_setting)


def migrate(
    owners: Mapping[int, list[int]], blacklisted: Iterable[int], live: Iterable[int]
) -> Migrate | None:
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


def replacement_command(
    full: list[str], fast: list[str] | None, pickled: tuple[bytes, ...]
) -> list[str]:
    """The fast entry (it joins before importing, ``runtime/replacement_entry.py``), unless what the
    replacement must unpickle names ``__main__`` (a class defined in the user's script):
    only the script itself can define it again."""
    if fast and not any(b"__main__" in blob for blob in pickled):
        return fast
    return full


def without_ulfm(version: tuple, recovery: bool) -> str:
    """Why Open MPI ``version`` has no ULFM here, and whether a rank's death ends the job."""
    name = f"Open MPI {'.'.join(map(str, version))}"
    if recovery:
        return f"{name} without ULFM; mpiexec --enable-recovery keeps the job alive after a rank's death"
    if tuple(version) < (5,):
        return (
            f"{name} has no ULFM and mpiexec was not given --enable-recovery: a rank death ends "
            "the job (launch with `mixle-mpi fit -n N`, which adds it where it exists)"
        )
    return f"{name} without --with-ft ulfm: a rank death ends the job; use `mixle-mpi run`"
