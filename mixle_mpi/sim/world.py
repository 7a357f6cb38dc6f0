"""The simulated world the real driver runs in, driven by one event queue and one clock.

Worker processes (``Process``) answer the driver's real messages (``core.protocol``) the way
a worker does: they set up, load and release shards, and compute tasks with the real
per-shard E-step (``core.estep``) on the stand-in model, one job at a time, at their own
speed. Each is reached over a ``SimLink`` (the shape of ``transport.Link``), watched by a
``SimMonitor`` (the shape of ``monitor.Monitor``: a death is noticed after a heartbeat
timeout, a hang after the stall timeout) and replaced by a ``SimSpawner`` (the shape of
``spawner.Spawner``). The driver's mailroom idles by running the world's next event.
"""

from __future__ import annotations

import heapq
import itertools
import pickle
import random
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from mixle_mpi.core import estep
from mixle_mpi.core.protocol import (
    STATS_AHEAD_MAX_BYTES,
    Abort,
    Load,
    Loaded,
    ReadOwn,
    Ready,
    Release,
    Result,
    Setup,
    Skip,
    Stats,
    Stop,
    Task,
)
from mixle_mpi.runtime.spawner import SpawnFailed, SpawnUnavailable
from mixle_mpi.runtime.transport import PeerFailed
from mixle_mpi.sim.standin import Encoder, Model
from mixle_mpi.storage.store import rows_from_packed

LATENCY = 0.001  # simulated seconds a message takes
QUANTUM = 0.25  # the clock's step while nothing is scheduled (a deadline's wait)
ROW_COST = 0.002  # simulated seconds per row of an E-step at speed 1
ULFM_ERROR = 75  # the error class a send to a dead peer raises (ULFM)


class Violation(AssertionError):
    """The driver's code broke exactness or termination on this schedule."""


class World:
    """The clock, the event queue and everything in the world; ``rng`` draws its chances."""

    def __init__(
        self,
        rng: random.Random,
        time_bound: float,
        event_bound: int,
        dup: float = 0.0,
        ulfm: bool = False,
    ) -> None:
        self.rng = rng
        self.now = 0.0
        self.time_bound, self.event_bound = time_bound, event_bound
        self.dup, self.ulfm = dup, ulfm
        self.queue: list = []
        self.seq = itertools.count()
        self.events = 0
        self.pids = itertools.count(1000)
        self.procs: list[Process] = []
        self.poisoned: dict[int, bytes] = {}  # id -> a payload only a fenced process sent
        self.bodies: dict[int, Any] = {}  # task id -> its unpickled body
        self.store: SimStore | None = None
        self.monitor: SimMonitor | None = None
        self.duplicates = self.late = 0
        self.invariants: Callable[[], None] = lambda: None  # checked at each of the driver's waits

    def clock(self) -> float:
        return self.now

    def at(self, when: float, fn: Callable, *args, wakes: bool = False) -> None:
        """``fn(*args)`` at ``when``; ``wakes``: the driver may see something new then (a
        reply, a suspect, a finished Spawn), so its sleep ends."""
        heapq.heappush(self.queue, (max(when, self.now), next(self.seq), wakes, fn, args))

    def idle(self) -> None:
        """The mailroom's pause: the world runs until something may wake the driver (or the
        clock moves on towards a deadline when nothing is scheduled). The driver's state is
        checked first (``invariants``): each wait ends one of its steps."""
        self.invariants()
        self.events += 1
        if self.events > self.event_bound:
            raise Violation(f"no end after {self.event_bound} polls")
        woke = False
        while self.queue and not woke:
            when, _, woke, fn, args = heapq.heappop(self.queue)
            self.now = max(self.now, when)
            fn(*args)
        if not woke:
            self.now += QUANTUM
        if self.now > self.time_bound:
            raise Violation(f"no end within {self.time_bound:g} simulated seconds")

    def run_until(self, when: float) -> None:
        """Every event up to ``when`` (the world moves on while the driver computes)."""
        while self.queue and self.queue[0][0] <= when:
            _, _, _, fn, args = heapq.heappop(self.queue)
            fn(*args)
        self.now = max(self.now, when)

    def spawn(self, host: str, speed: float = 1.0) -> "Process":
        proc = Process(self, next(self.pids), host, speed)
        self.procs.append(proc)
        return proc

    def poison(self, msg):
        """What a fenced process's late reply carries: payloads that must never be folded."""
        if not isinstance(msg, Result):
            return msg
        bad = []
        for shard, _payload in msg.results:
            fake = pickle.dumps(("fenced", shard, self.events))
            self.poisoned[id(fake)] = fake
            bad.append((shard, fake))
        return msg._replace(results=bad)


class ShardJob:
    """One shard of a task, a job of its own: replies leave shard by shard, as a worker's do."""

    __slots__ = ("task", "item")

    def __init__(self, task: Task, item: tuple) -> None:
        self.task, self.item = task, item


class Process:
    """One simulated worker process: it holds shards encoded and runs one job at a time."""

    def __init__(self, world: World, pid: int, host: str, speed: float) -> None:
        self.world, self.pid, self.host, self.speed = world, pid, host, speed
        self.state = "up"  # up | hung | dead | ended
        self.fenced = False  # the driver gave it up: anything it sends later is poisoned
        self.hung_until = 0.0
        self.reads_store = world.rng.random() < 0.8
        self.worker = self.incarnation = 0
        self.link: SimLink | None = None
        self.resident: dict[int, Any] = {}  # shard -> its encoded chunks
        self.kept: set[int] = set()  # of those, copies kept for another place
        self.loading: dict[int, list] = {}
        self.jobs: deque = deque()
        self.busy = False
        self.skipped: dict[int, set] = {}  # task id -> shards the driver said to leave out (Skip)

    def __repr__(self) -> str:
        return f"process {self.pid} (worker {self.worker}.{self.incarnation}, {self.state})"

    # -- faults ----------------------------------------------------------------------
    def die(self) -> None:
        if self.state in ("up", "hung"):
            self.state = "dead"
            self.world.monitor.noticed(
                self, self.world.now + self.world.rng.uniform(0.05, 1.0), "heartbeat: silent"
            )

    def hang(self, seconds: float) -> None:
        """Its main thread stops for ``seconds`` (its heartbeats go on): late, or fenced."""
        if self.state == "up":
            self.state, self.hung_until = "hung", self.world.now + seconds
            self.world.at(self.hung_until, self._wake)
            self.world.monitor.stalled(self, self.world.now)

    def _wake(self) -> None:
        if self.state == "hung":
            self.state = "up"
            self._next()

    # -- messages --------------------------------------------------------------------
    def receive(self, msg, link: "SimLink") -> None:
        if self.state in ("dead", "ended"):
            return
        self.link = link
        if isinstance(msg, (Stop, Abort)):
            self.state = "ended"
        elif isinstance(
            msg, Release
        ):  # as a worker: the shards are dropped, kept copies or its own
            for s in msg.shards:
                self.kept.discard(s)
                self.resident.pop(s, None)
        elif isinstance(
            msg, Skip
        ):  # read between shards, as a worker does: the one under way goes on
            self.skipped.setdefault(msg.task_id, set()).update(msg.shards)
        else:
            self.jobs.append(msg)
            self._next()

    def _next(self) -> None:
        if self.busy or self.state != "up" or not self.jobs:
            return
        msg = self.jobs.popleft()
        if isinstance(msg, Task):  # one job per shard, so that replies leave shard by shard
            self.jobs.extendleft(reversed([ShardJob(msg, item) for item in msg.items]))
            return self._next()
        if isinstance(msg, ShardJob) and msg.item[0] in self.skipped.get(msg.task.task_id, ()):
            if msg.task.keep and msg.item[1] is not None:  # a recovered shard is kept all the same
                self._hold(msg.item[0], rows_from_packed(msg.item[1]), kept=True)
            return self._next()
        self.busy = True
        cost, replies = self._work(msg)
        self.world.at(self.world.now + cost / self.speed, self._done, replies)

    def _done(self, replies: list) -> None:
        self.busy = False
        if self.state == "dead" or self.state == "ended":
            return
        if self.state == "hung":  # its replies leave when it wakes
            self.world.at(self.hung_until, self._done, replies)
            self.busy = True
            return
        for msg in replies:
            self.send(msg)
            if isinstance(msg, Result) and self.world.rng.random() < self.world.dup:
                self.world.duplicates += 1  # a copy, delivered later (maybe in a later round)
                self.send(msg, self.world.rng.uniform(LATENCY, 0.5))
        self._next()

    def send(self, msg, delay: float = LATENCY) -> None:
        if self.fenced:
            self.world.late += 1
            msg = self.world.poison(msg)
        if self.link is not None:
            self.world.at(self.world.now + delay, self.link.inbox.append, msg, wakes=True)

    def _work(self, msg) -> tuple[float, list]:
        """The cost and the replies of one job (computed now, sent when it is done)."""
        if isinstance(msg, Setup):
            self.worker, self.incarnation = msg.worker, msg.incarnation
            return 0.01, [
                Ready(
                    msg.worker,
                    self.host,
                    self.pid,
                    reads_store=self.reads_store and bool(msg.own_store),
                )
            ]
        if isinstance(msg, ReadOwn):
            return self._read_own(msg.shards)
        if isinstance(msg, Load):
            self.loading.setdefault(msg.shard, []).extend(rows_from_packed(msg.packed))
            if not msg.last:
                return 0.001, []
            rows = self.loading.pop(msg.shard)
            self._hold(msg.shard, rows, kept=False)
            return 0.001 * len(rows), [Loaded(msg.shard, len(rows))]
        if isinstance(msg, ShardJob):
            return self._shard(msg.task, msg.item)
        return 0.001, []  # Reach and the rest: nothing the simulated driver asks

    def _hold(self, shard: int, rows: list, kept: bool) -> None:
        self.resident[shard] = estep.encode_shard(Encoder(), rows, 2)
        (self.kept.add if kept else self.kept.discard)(shard)

    def _read_own(self, shards) -> tuple[float, list]:
        replies, cost = [], 0.0
        for s in shards:
            if self.world.rng.random() < 0.1:
                replies.append(Loaded(s, 0, unread="sim: the store cannot be read here"))
                continue
            rows = self.world.store.rows(s)
            self._hold(s, rows, kept=False)
            cost += 0.001 * len(rows)
            replies.append(Loaded(s, len(rows)))
        return cost, replies

    def _shard(self, task: Task, item: tuple) -> tuple[float, list]:
        """One shard of a task: rows sent with it are kept only if the task says so (a
        recovery); a speculative copy is computed once and dropped."""
        if task.task_id not in self.world.bodies:
            self.world.bodies[task.task_id] = pickle.loads(task.body)  # nosec B301 - the simulation's own
        body = self.world.bodies[task.task_id]
        shard, packed, extra = item
        if packed is not None and task.keep:
            self._hold(shard, rows_from_packed(packed), kept=True)
        chunks = (
            self.resident.get(shard)
            if packed is None or task.keep
            else estep.encode_shard(Encoder(), rows_from_packed(packed), 2)
        )
        if chunks is None:
            raise Violation(
                f"{self!r} was asked for shard {shard}, which it does not hold "
                f"(resident {sorted(self.resident)})"
            )
        ahead: list = []
        offer = (
            (lambda p: len(p) <= STATS_AHEAD_MAX_BYTES and not ahead.append(p))
            if task.score_call >= 0
            else None
        )
        payload = estep.shard_result(
            task.kind, body, chunks, extra, task.score_call >= 0, ahead=offer
        )
        cost = ROW_COST * sum(n for n, _ in chunks)
        replies = [Stats(task.task_id, shard, p) for p in ahead]
        replies.append(Result(task.task_id, [(shard, payload)], 0.0, (cost / self.speed,)))
        return cost, replies


class SimLink:
    """The shape of ``transport.Link``: what the driver posts reaches the process after a
    latency; its replies wait in ``inbox`` until the driver polls."""

    comm = hb = inter = None

    def __init__(self, world: World, proc: Process) -> None:
        self.world, self.proc, self.peer = world, proc, proc.pid
        self.inbox: deque = deque()
        self.sends: list = []
        proc.link = self

    def post(self, obj, tag: int = 0) -> None:
        if self.proc.state == "dead" and self.world.ulfm and self.world.rng.random() < 0.5:
            raise PeerFailed(ULFM_ERROR, f"sim: process {self.proc.pid} is dead")
        self.world.at(self.world.now + LATENCY, self.proc.receive, obj, self)

    def progress(self) -> bool:
        return True

    def poll(self, tag: int, comm: Any = None):
        return self.inbox.popleft() if self.inbox else None


class SimMonitor:
    """The shape of ``monitor.Monitor``: names a watched worker a suspect once its process
    has been silent for the heartbeat timeout (dead) or stuck for the stall timeout (hung)."""

    def __init__(self, world: World, stall_timeout: float) -> None:
        self.world, self.stall_timeout = world, stall_timeout
        self.watched: dict[int, Process] = {}
        self.due: list[tuple[float, Process, str]] = []
        self.forgotten: dict[
            int, Process | None
        ] = {}  # worker -> the process just unwatched (failed, or a spare adopting)

    def noticed(self, proc: Process, when: float, cause: str) -> None:
        self.due.append((when, proc, cause))
        self.world.at(when, lambda: None, wakes=True)

    def stalled(self, proc: Process, since: float) -> None:
        self.world.at(since + self.stall_timeout, self._check_stall, proc, since)

    def _check_stall(self, proc: Process, since: float) -> None:
        if proc.state == "hung" and proc.hung_until > since + self.stall_timeout:
            self.noticed(proc, self.world.now, f"stalled: no progress for {self.stall_timeout:g} s")

    def watch(self, worker: int, link: SimLink) -> None:
        self.watched[worker] = link.proc
        self.forgotten.pop(worker, None)
        if link.proc.state == "dead":  # it died before it was watched: it never beats
            self.noticed(link.proc, self.world.now + 1.0, "heartbeat: never heard")

    def forget(self, worker: int) -> None:
        self.forgotten[worker] = self.watched.pop(worker, None)

    def grace(self, worker: int, seconds: float) -> None:
        pass

    def extend(self, worker: int) -> None:
        pass

    def heard_since(self, worker: int, since: float) -> bool:
        return False

    def send(self, worker: int, msg) -> None:
        pass

    def quiet(self, seconds: float) -> None:
        pass

    def stop(self) -> None:
        pass

    def take_suspects(self) -> dict[int, tuple[str, float]]:
        now, out, later = self.world.now, {}, []
        for when, proc, cause in self.due:
            if when > now:
                later.append((when, proc, cause))
                continue
            for w, p in self.watched.items():
                if p is proc:
                    out[w] = (cause, when)
        self.due = later
        return out


class SimSpawner:
    """The shape of ``spawner.Spawner``: a replacement process after a delay, in the
    background or at once (``respawn_wait``); now and then one dies before it joins, or
    Spawn fails (then it is never tried again, as on a real MPI)."""

    command = ["sim-replacement"]
    unavailable = None

    def __init__(self, world: World, background: bool, timeout: float) -> None:
        self.world, self.background, self.timeout = world, background, timeout
        self.running: dict[int, tuple[float, Any]] = {}
        self.born: dict[int, tuple[int, str]] = {}
        self.started = 0

    def start(
        self, worker: int, host: str | None, pickled: tuple, here: bool = False
    ) -> SimLink | None:
        rng = self.world.rng
        if rng.random() < 0.02:
            raise SpawnUnavailable("sim: MPI_Comm_spawn refused")
        self.started += 1
        proc = self.world.spawn(host or "sim-host-new")
        if rng.random() < 0.1:  # dies right after it starts
            self.world.at(self.world.now + rng.uniform(0.0, 0.5), proc.die)
        if not self.background:
            return SimLink(self.world, proc)
        when = self.world.now + rng.uniform(0.05, 1.0)
        roll = rng.random()
        got = (
            SpawnFailed("sim: its process died before joining", True)
            if roll < 0.05
            else SpawnFailed("sim: spawn error")
            if roll < 0.07
            else SimLink(self.world, proc)
        )
        self.running[worker] = (when, got)
        self.world.at(when, lambda: None, wakes=True)
        return None

    def finished(self, now: float) -> list:
        ended = [(w, got) for w, (when, got) in self.running.items() if when <= now]
        for w, _ in ended:
            del self.running[w]
        return ended

    def settle(self) -> None:
        if self.running:
            self.world.run_until(max(when for when, _ in self.running.values()))

    def fenced(self, worker: int, pid: int) -> None:
        pass


class SimStore:
    """The shape of ``storage.store.ShardStore``: shards of random floats, in 1-3 blocks."""

    store_id, path = "sim-store", "sim-store.h5"

    def __init__(self, rng: random.Random, num_shards: int) -> None:
        self.num_shards = num_shards
        self.data = [
            np.array([rng.uniform(-2.0, 2.0) for _ in range(rng.randint(1, 12))])
            for _ in range(num_shards)
        ]
        self.splits = [
            sorted({0, len(d), *(rng.randint(0, len(d)) for _ in range(rng.randint(0, 2)))})
            for d in self.data
        ]

    def rows(self, i: int) -> list:
        return self.data[i].tolist()

    def shard_bytes(self, i: int) -> int:
        return int(self.data[i].nbytes)

    def read_packed(self, i: int, start: int = 0, stop: int | None = None):
        return "scalars", self.data[i][start:stop]

    def blocks(self, i: int) -> list[tuple[int, int]]:
        cuts = self.splits[i]
        return list(itertools.pairwise(cuts)) or [(0, 0)]


def reference_fold(store: SimStore, estimator, model: Model, scores: bool) -> tuple:
    """The failure-free result: every shard's E-step, folded in shard order (and its scores)."""
    from mixle_mpi.core.prefixfold import PrefixFold

    fold, got = PrefixFold(estimator, store.num_shards), {}
    for s in range(store.num_shards):
        chunks = estep.encode_shard(Encoder(), store.rows(s), 2)
        result = estep.shard_result("estep", (estimator, model), chunks, None, scores)
        payload, got[s] = result if scores else (result, None)
        fold.add(s, payload)
    return fold.result(), got
