"""Deterministic chaos, the plan: which worker does what, when, at which phase (pure).

The MPI equivalent of mixle's ``arm_kill``: a worker process checks the plan at fixed
points of its own code and kills, stops or ends *itself* (``chaos/fault_actor``), so a test
kills a real process with no timing race. Plans come from the API (``fault_plan=``) or
``MIXLE_MPI_FAULT_PLAN``, as JSON or as compact ``worker:action:phase[:call[:incarnation]]``
items joined by commas.

Before it acts, the victim records that its fault fired: one JSON line (event
``fault_fired``) appended and fsynced to the file named by ``MIXLE_MPI_FAULT_LOG``, if set,
and a line on stderr. A campaign or a test compares the records with the plan
(:func:`unfired`): a planned fault that left no record did not happen, and a run that was
meant to survive it proves nothing. The records also make each fault fire once per job: a
driver (a successor after failover, or the first one of a job the launcher ran again) leaves
out the faults the log records already.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from mixle_mpi.core.errors import ConfigError

ACTIONS = (
    "kill",
    "stop",
    "exit",
    "hang",
    "delay",
    "slow",
)  # hang: the main thread blocks for good, heartbeats go on
DELAY_SECONDS = (
    10.0  # "delay": a straggler, whose main thread sleeps this long once (heartbeats go on)
)
SLOW_FACTOR = (
    4.0  # "slow": from then on each shard takes this many times as long (``Fault.factor``)
)
PHASES = (
    "init",
    "estep_before",
    "estep_mid",
    "stats_sent",
    "estep_after_reply",
    "llsum",
    "respawn",
    "checkpoint_write",
    "startup",
    "handshake",
    "spawn",
    "shrink",
    "load",
)
STARTUP_PHASES = (
    "startup",
    "handshake",
)  # an original worker, before setup: read from the environment
SPAWN_PHASE = "spawn"  # a replacement, as its process starts: read from the environment
SPAWNED_ENV = (
    "OMPI_PARENT_PORT",
    "PMI_SPAWNED",
)  # Open MPI / MPICH: this process was started by MPI_Comm_spawn
DRIVER_PHASES = (
    "estep_before",
    "estep_mid",
    "llsum",
    "checkpoint_write",
    "respawn",
    "shrink",
)  # worker 0 is the driver
DRIVER_ONLY = ("checkpoint_write", "shrink")
SCOPES = ("any", "own", "recovery")
ENV_VAR = "MIXLE_MPI_FAULT_PLAN"
FIRED_ENV = "MIXLE_MPI_FAULT_LOG"  # where a victim records its fault before acting


@dataclass(frozen=True)
class Fault:
    """Worker place ``worker`` performs ``action`` at ``phase`` of call number ``call``.

    ``startup`` fires on an original worker right after MPI init, before it says hello to
    the driver; ``handshake`` once the driver's go arrived, before the job's communicator is
    built. ``spawn`` fires in a replacement process as it starts, before its MPI
    initialisation, so that it dies inside the driver's ``MPI_Comm_spawn``; such a process
    does not know yet whom it replaces, so spawn faults fire in the order replacements
    start, one each (``worker`` names the place the plan expects). Those three come from
    ``MIXLE_MPI_FAULT_PLAN`` (the process has no setup yet), less the ones the fault log
    says fired already.
    ``call`` counts the driver's calls of that kind from 0 (E-step rounds for the estep
    phases, initializations, log-density sums; for ``checkpoint_write`` the iteration being
    written; for ``shrink`` the job's shrinks from 1); it is ignored for ``respawn``. Worker
    0 is the driver itself (phases ``estep_before``, ``estep_mid`` -- after a first result
    was journaled, or, with scope ``recovery``, once it sent a recovery task --, ``llsum`` --
    before a log-density round goes out --, ``checkpoint_write``, ``respawn`` -- once it
    started a replacement -- and ``shrink`` -- once it told the survivors of a worker
    failure to shrink, before it joins them), for checkpoint, resume and failover tests.
    ``incarnation`` picks the process: 0 is the original, 1 its first replacement, ...
    ``scope`` limits task phases to the worker's own shards or to recovery work.
    ``load`` fires in a worker while it loads shards it is to keep (streamed from the driver
    or read from the store: at the start, in a replacement, after a migration, in a spare
    adopting a place), once the first shard of that load is in: ``call`` counts this
    process's loads from 0, so ``w:kill:load:0:1`` kills worker ``w``'s first replacement
    as it loads its shards.
    ``stats_sent`` fires in an E-step task that also scores (policy/lookahead.py), once a
    shard's E-step payload went to the driver ahead of its result (protocol.Stats), before
    the worker scores that shard: the driver has folded what the worker will never answer for.
    """

    worker: int
    action: str
    phase: str
    call: int = 0
    incarnation: int | None = None
    scope: str = "any"
    factor: float = SLOW_FACTOR  # "slow": how many times as long each shard takes from then on

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ConfigError(
                f"fault action {self.action!r} is unknown; valid actions are {list(ACTIONS)}"
            )
        if self.phase not in PHASES:
            raise ConfigError(
                f"fault phase {self.phase!r} is unknown; valid phases are {list(PHASES)}"
            )
        if self.scope not in SCOPES:
            raise ConfigError(
                f"fault scope {self.scope!r} is unknown; valid scopes are {list(SCOPES)}"
            )
        if isinstance(self.worker, bool) or not isinstance(self.worker, int) or self.worker < 0:
            raise ConfigError(
                f"fault worker must be a rank >= 0 (0 is the driver); found {self.worker!r}"
            )
        if (
            isinstance(self.factor, bool)
            or not isinstance(self.factor, (int, float))
            or not self.factor >= 1
        ):
            raise ConfigError(
                f"fault factor must be a number >= 1 (how many times as long a shard takes); "
                f"found {self.factor!r}"
            )
        if self.action == "slow" and (
            self.worker == 0 or self.phase not in ("init", "estep_before", "llsum")
        ):
            raise ConfigError(
                "action 'slow' is for a worker at a task's start (phase init, estep_before or llsum); "
                f"found worker {self.worker}, phase {self.phase!r}"
            )
        if self.worker == 0 and self.action == "hang":
            raise ConfigError(
                "action 'hang' is for workers: the driver has no stall detection (use kill or stop)"
            )
        if self.worker == 0 and self.phase not in DRIVER_PHASES:
            raise ConfigError(
                f"the driver (rank 0) can only fault at {list(DRIVER_PHASES)}; found phase {self.phase!r}"
            )
        if self.worker > 0 and self.phase in DRIVER_ONLY:
            raise ConfigError(f"phase {self.phase!r} happens on the driver only: use worker 0")
        if isinstance(self.call, bool) or not isinstance(self.call, int) or self.call < 0:
            raise ConfigError(f"fault call must be an integer >= 0; found {self.call!r}")
        if self.incarnation is None:
            replacement = (
                self.phase in ("respawn", SPAWN_PHASE) and self.worker > 0
            )  # the driver is the original
            object.__setattr__(self, "incarnation", 1 if replacement else 0)
        if (
            isinstance(self.incarnation, bool)
            or not isinstance(self.incarnation, int)
            or self.incarnation < 0
        ):
            raise ConfigError(
                f"fault incarnation must be an integer >= 0; found {self.incarnation!r}"
            )

    def matches(self, worker: int, incarnation: int, phase: str, call: int, recovery: bool) -> bool:
        if phase == SPAWN_PHASE:  # the starting process knows no worker yet (see the class doc)
            return self.phase == SPAWN_PHASE
        if (self.worker, self.incarnation, self.phase) != (worker, incarnation, phase):
            return False
        if phase != "respawn" and self.call != call:
            return False
        return self.scope == "any" or (self.scope == "recovery") == recovery


def parse_plan(spec) -> tuple[Fault, ...]:
    """Accept None, Fault objects, dicts, a JSON string or the compact string form."""
    if spec is None or spec == "" or spec == []:
        return ()
    if isinstance(spec, str):
        text = spec.strip()
        if text.startswith("[") or text.startswith("{"):
            try:
                spec = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"fault plan is not valid JSON ({exc}); found {text!r}") from None
            if isinstance(spec, dict):
                spec = [spec]
        else:
            spec = [_parse_compact(item) for item in text.split(",") if item.strip()]
    if isinstance(spec, (Fault, dict)):
        spec = [spec]
    if not isinstance(spec, (list, tuple)):
        raise ConfigError(
            f"a fault plan must be a list, a dict, a Fault or a string; found {type(spec).__name__} {spec!r}"
        )
    faults = []
    for item in spec:
        if isinstance(item, Fault):
            faults.append(item)
        elif isinstance(item, dict):
            try:
                faults.append(Fault(**item))
            except TypeError as exc:
                raise ConfigError(f"bad fault entry {item!r}: {exc}") from None
        else:
            raise ConfigError(f"a fault entry must be a dict or Fault; found {type(item).__name__}")
    return tuple(faults)


def _parse_compact(item: str) -> dict:
    parts = item.strip().split(":")
    if not 3 <= len(parts) <= 7:
        raise ConfigError(
            f"compact fault {item!r} must look like worker:action:phase[:call[:incarnation[:scope[:factor]]]]"
        )
    try:
        out = {"worker": int(parts[0]), "action": parts[1], "phase": parts[2]}
        if len(parts) > 3:
            out["call"] = int(parts[3])
        if len(parts) > 4 and parts[4] != "":
            out["incarnation"] = int(parts[4])
    except ValueError:
        raise ConfigError(
            f"compact fault {item!r}: worker, call and incarnation must be integers"
        ) from None
    if len(parts) > 5 and parts[5] != "":
        out["scope"] = parts[5]
    if len(parts) > 6:
        try:
            out["factor"] = float(parts[6])
        except ValueError:
            raise ConfigError(f"compact fault {item!r}: factor must be a number") from None
    return out


def plan_from_env(environ=None) -> tuple[Fault, ...]:
    environ = os.environ if environ is None else environ
    return parse_plan(environ.get(ENV_VAR))


def plan_to_json(plan) -> str:
    return json.dumps([asdict(f) for f in plan])


def read_fired(path: str | None) -> list[dict]:
    """The ``fault_fired`` records in ``path`` (a fault log or an event log); [] if it is missing.
    A torn last line (a writer killed mid-write) is skipped."""
    try:
        with open(path or "", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("event") == "fault_fired":
            out.append(rec)
    return out


def needs_replacement_rounds(plan) -> bool:
    """Whether ``plan`` has a replacement act once it is set up (incarnation >= 1, in its
    setup or in one of its rounds): the fit sees that act only if it waits for the
    replacement to join; joining in the background, the fit may end first (pure)."""
    return any(f.incarnation >= 1 and f.phase != SPAWN_PHASE for f in parse_plan(plan))


def pending_from_env(phases: tuple, environ=None) -> list[Fault]:
    """The faults of ``MIXLE_MPI_FAULT_PLAN`` at ``phases`` that the fault log does not record
    as fired: a job launched again meets each such fault once. A bad plan is the driver's to
    report, so it gives none here."""
    environ = os.environ if environ is None else environ
    try:
        plan = [f for f in parse_plan(environ.get(ENV_VAR, "")) if f.phase in phases]
    except ConfigError:
        return []
    return unfired(plan, read_fired(environ.get(FIRED_ENV)))


def started_by_spawn(environ=None) -> bool:
    """Whether this process is a replacement started by ``MPI_Comm_spawn`` (from the
    environment its MPI gives it; readable before MPI initialisation)."""
    environ = os.environ if environ is None else environ
    return any(var in environ for var in SPAWNED_ENV)


def unfired(plan, fired: list[dict]) -> list[Fault]:
    """The planned faults that no record says fired (each record accounts for one fault; pure)."""
    keys = ("worker", "action", "phase", "call", "incarnation", "scope")
    left = [tuple(r.get(k) for k in keys) for r in fired]
    missing = []
    for fault in parse_plan(plan):
        key = tuple(getattr(fault, k) for k in keys)
        if key in left:
            left.remove(key)
        else:
            missing.append(fault)
    return missing
