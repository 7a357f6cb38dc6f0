"""Run one schedule through the real driver in the simulated world and check what makes a
fit exact and bounded:

- each shard of each round is folded exactly once, never from a fenced process's reply,
  and the folded result (and the scores) are bit for bit the failure-free fold's;
- every round ends, within a bound of simulated time and of events;
- no process that was working is declared failed, and no live place is blacklisted;
- no process is asked for a shard it does not hold.

A violation names its seed and the command that replays it.
"""

from __future__ import annotations

import pickle
import random
import traceback
from dataclasses import dataclass

from mixle_mpi.core import clock
from mixle_mpi.core.errors import NoWorkersLeft
from mixle_mpi.core.prefixfold import PrefixFold
from mixle_mpi.core.settings import Settings
from mixle_mpi.policy.places import PlacementBroken
from mixle_mpi.policy.reconfig_plan import KEEP
from mixle_mpi.runtime.driver import Driver
from mixle_mpi.runtime.wiring import Wiring
from mixle_mpi.sim.schedule import RECONFIGURE, STALL, Schedule
from mixle_mpi.sim.standin import Encoder, Estimator, model_of_round
from mixle_mpi.sim.world import (
    SimLink,
    SimMonitor,
    SimSpawner,
    SimStore,
    Violation,
    World,
    reference_fold,
)
from mixle_mpi.storage.events import EventLog

EVENT_BOUND = 200_000
COUNTED = (
    "failure_detected",
    "recovery",
    "respawn_started",
    "respawned",
    "spare_adopted",
    "blacklisted",
    "migrated",
    "store_unread",
    "spawn_unavailable",
    "speculated",
    "speculation_won",
    "rebalanced",
)


@dataclass
class Outcome:
    rounds_done: int
    no_workers: bool
    events: int
    seconds: float  # simulated
    counts: dict  # driver event -> how many (COUNTED)
    late: int  # replies a fenced process sent
    duplicates: int  # Results delivered twice


def replay_command(seed: int) -> str:
    return f"python -m mixle_mpi.sim --seed {seed}"


class CheckedEvents(EventLog):
    """The driver's event log, checked as each event is written: a failure of a process
    that was working, or a blacklisted place that lives, is a violation at once."""

    def __init__(self, monitor: SimMonitor) -> None:
        super().__init__(None, echo=None)
        self.monitor = monitor

    def emit(self, event: str, **fields):
        w = fields.get("worker")
        if event == "failure_detected":
            proc = self.monitor.forgotten.get(w)
            if proc is not None and proc.state not in ("dead", "hung"):
                raise Violation(
                    f"worker {w}'s {proc!r} was declared failed while working: {fields.get('cause')}"
                )
            if proc is not None:
                proc.fenced = (
                    True  # the driver gave it up: whatever it sends from now on must never count
                )
        if (
            event == "blacklisted"
            and w in self.monitor.watched
            and self.monitor.watched[w].state == "up"
        ):
            raise Violation(
                f"worker {w} was blacklisted while its {self.monitor.watched[w]!r} lives"
            )
        return super().emit(event, **fields)


def _strike(world: World, place: int, kind: str, seconds: float) -> None:
    """A planned fault hits the place's current process (if it has one up)."""
    procs = [p for p in world.procs if p.worker == place and p.state in ("up", "hung")]
    if not procs:
        return
    proc = procs[-1]
    if kind == "die":
        proc.die()
    elif kind in ("hang", "pause"):
        proc.hang(seconds)
    else:
        proc.speed *= seconds


def _round(driver: Driver, world: World, store: SimStore, r: int, scores: bool) -> None:
    estimator, model = Estimator(), model_of_round(r)
    fold, folded = PrefixFold(estimator, store.num_shards), set()

    def add(shard: int, payload) -> None:
        if shard in folded:
            raise Violation(f"round {r}: shard {shard} folded twice")
        if id(payload) in world.poisoned:
            raise Violation(f"round {r}: shard {shard} folded from a fenced process's late reply")
        folded.add(shard)
        fold.add(shard, payload)

    got_scores: dict | None = {} if scores else None
    driver.run_round("estep", (estimator, model), fold=add, scores=got_scores)
    if folded != set(range(store.num_shards)):
        raise Violation(f"round {r}: folded shards {sorted(folded)} of {store.num_shards}")
    want, want_scores = reference_fold(store, estimator, model, scores)
    if fold.result() != want:
        raise Violation(f"round {r}: folded {fold.result()!r}, the failure-free fold is {want!r}")
    if scores and got_scores != want_scores:
        raise Violation(f"round {r}: scores {got_scores!r}, failure-free {want_scores!r}")


def _world(s: Schedule) -> tuple[World, SimStore, SimMonitor, dict]:
    rng = random.Random(s.seed)
    bound = 30.0 + 5.0 * s.rounds + 3 * len(s.faults) * (RECONFIGURE + STALL)
    world = World(rng, bound, EVENT_BOUND, s.dup, s.ulfm)
    world.store = store = SimStore(rng, s.shards)
    world.monitor = monitor = SimMonitor(world, STALL)
    links = {
        w: SimLink(world, world.spawn(f"sim-host-{w}", s.speeds.get(w, 1.0)))
        for w in range(1, s.workers + 1)
    }
    for when, place, kind, seconds in s.faults:
        world.at(when, _strike, world, place, kind, seconds)
    return world, store, monitor, links


def _driver(s: Schedule, world: World, store: SimStore, monitor: SimMonitor, links: dict) -> Driver:
    settings = Settings(
        reconfigure_timeout=RECONFIGURE,
        stall_timeout=STALL,
        respawn=s.respawn,
        respawn_wait=not s.background,
        spares=s.spares,
        workers_read_store=s.read_store,
        own_read_min_bytes=0,
        doorbells=False,
        driver_computes=s.driver_computes,
    )
    wiring = Wiring(
        links, SimSpawner(world, s.background, RECONFIGURE), "sim-driver", None, world.idle
    )
    return Driver(
        None,
        {w: w for w in links},
        s.workers,
        monitor,
        store,
        pickle.dumps(Encoder()),
        2,
        s.max_retries,
        settings,
        CheckedEvents(monitor),
        (),
        KEEP,
        wiring,
        s.spares,
    )


def _placement_check(driver: Driver):
    """The driver's placement invariants (``Places.check``), as a Violation."""

    def check() -> None:
        try:
            driver.places.check()
        except PlacementBroken as exc:
            raise Violation(f"the placement broke: {exc}") from None

    return check


def run(s: Schedule) -> Outcome:
    """Run ``s``; raises Violation (with its seed and replay command) or returns its Outcome."""
    world, store, monitor, links = _world(s)
    done, no_workers, driver = 0, False, None
    try:
        with clock.simulated(world.clock):
            driver = _driver(s, world, store, monitor, links)
            world.invariants = _placement_check(driver)
            try:
                driver.start()
                for r in range(s.rounds):
                    _round(driver, world, store, r, s.scores)
                    done += 1
            except NoWorkersLeft:
                no_workers = True
            driver.close()
            driver.finish()
    except Violation as exc:
        raise Violation(f"seed {s.seed}: {exc}\n  replay: {replay_command(s.seed)}") from None
    except Exception:
        raise Violation(
            f"seed {s.seed}: the driver raised\n{traceback.format_exc()}"
            f"  replay: {replay_command(s.seed)}"
        ) from None
    counts = {e: 0 for e in COUNTED}
    for rec in driver.events.events:
        if rec["event"] in counts:
            counts[rec["event"]] += 1
    return Outcome(done, no_workers, world.events, world.now, counts, world.late, world.duplicates)


def simulate(seeds) -> list[Outcome]:
    """Run the schedules of ``seeds``; the first violation is raised with its seed."""
    return [run(Schedule.draw(seed)) for seed in seeds]
