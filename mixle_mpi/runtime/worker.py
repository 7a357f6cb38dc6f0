"""A worker rank: holds encoded shards, runs E-step tasks, heartbeats, obeys the driver.

Heartbeats run on their own thread and communicator, so a shard that computes for longer
than the heartbeat timeout is not mistaken for a dead rank. A worker that stops hearing the
driver for ``driver_timeout`` seconds (or whose reconfiguration overruns its deadline)
ends itself: a worker never outlives its job. With failover on, a driver known dead
(an MPI error, or its process gone) is followed instead (runtime/takeover.py).
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections import deque
from typing import Any

from mpi4py import MPI

from mixle_mpi.chaos.fault_actor import FaultInjector
from mixle_mpi.chaos.fault_plan import parse_plan
from mixle_mpi.core import estep, logs, numerics, probes, procs
from mixle_mpi.core.blas import pin_blas_threads
from mixle_mpi.core.deadlines import run_with_deadline
from mixle_mpi.core.engine import warm as warm_engine
from mixle_mpi.core.exitcodes import DRIVER_LOST, NEVER_STARTED, RECONFIG_TIMEOUT
from mixle_mpi.core.malloc import peak_rss_mb, retain_freed_memory
from mixle_mpi.core.protocol import (
    REPLY_BATCH_SECONDS,
    STATS_AHEAD_MAX_BYTES,
    TAG_CMD,
    TAG_HB,
    TAG_REPLY,
    Abort,
    Beat,
    Fence,
    Load,
    Loaded,
    Quiet,
    Reach,
    Reached,
    ReadOwn,
    Ready,
    Release,
    Result,
    Setup,
    Shrink,
    ShrinkGo,
    ShrinkReady,
    Shrunk,
    Skip,
    Stats,
    Stop,
    Task,
    TaskError,
)
from mixle_mpi.launch import contract
from mixle_mpi.policy.failover_plan import (
    agrees_by_messages,
    can_take_over,
    election_window,
    successor,
    takes_over_on,
)
from mixle_mpi.policy.heartbeat import driver_silence_limit
from mixle_mpi.policy.pacing import NEVER, next_task_window
from mixle_mpi.runtime import birth, doorbell
from mixle_mpi.runtime.beatrelay import BeatRelay
from mixle_mpi.runtime.shrink import shrink
from mixle_mpi.runtime.takeover import (
    NoAgreement,
    agree,
    announce,
    driver_in,
    peer_says_driver_dead,
)
from mixle_mpi.runtime.transport import Backoff, Link, PeerFailed, host_and_pid
from mixle_mpi.storage.store import ShardStore, opens_store, rows_from_packed


class DriverLost(Exception):
    """The driver is known dead and failover is on: leave serving and elect a successor."""


DRIVER_GONE_AFTER_BEATS = (
    3  # heartbeat periods of silence before a worker looks at the driver's pid
)
_who = {"rank": None}  # this worker's rank, once the driver or the startup said it


def die(code: int, why: str) -> None:
    """End this worker process now, with one line that says why."""
    rank = _who["rank"]
    name = (
        f"worker rank {rank} (pid {os.getpid()})"
        if rank is not None
        else f"worker pid {os.getpid()}"
    )
    logs.get("worker").error(f"{name}: {why}; exiting with code {code}")
    flush_and_exit(code)


class Worker:
    def __init__(
        self,
        link: Link,
        spawned: bool,
        birth_record: str | None = None,
        setup_within: float | None = None,
        driver: tuple[int, str] | None = None,
    ) -> None:
        self.link = link
        self.parent = driver  # a replacement's driver (pid, start time), when on this host: watched until Setup
        self._parent_look = 0.0
        # a replacement has no heartbeats before its Setup: it waits for it this long at most
        self.setup_by = None if setup_within is None else time.monotonic() + setup_within
        self.spawned = spawned
        self.birth_record = (
            birth_record  # a replacement's (runtime/birth.py), until the driver has read it
        )
        self.lock = threading.Lock()
        self.worker_id = -1
        self.incarnation = 0
        self.encoder: Any = None
        self.encoder_pickled: bytes | None = None
        self.sub_chunks = 1
        self.engine = "seq"
        self.resident: dict[int, estep.Chunks] = {}
        self._loading: dict[int, list] = {}  # rows of shards still arriving in parts
        self.loads = 0  # loads begun by this process (the ``load`` fault phase's call)
        self._in_load = False  # a load is under way: its first shard is in
        self.faults = FaultInjector((), -1, 0)
        self.period, self.driver_timeout, self.reconfigure_timeout = 0.1, 60.0, 60.0
        self.deadline: float | None = None  # set while inside a collective
        self.last_driver = time.monotonic()
        self.quiet_until = 0.0  # the driver said it may not beat until then (protocol.Quiet)
        self.driver_proc: tuple[str, int, str] = ("", 0, "")  # the driver's host, pid, start
        self.driver_space = ""  # the driver's pid space: its pid is looked at only if it is ours
        self.failover = ""  # how survivors agree on a dead driver's successor, once armed (Reach)
        self.failover_how = ""  # the same, as the driver asked for it (Setup.failover)
        self.store_unreadable = (
            ""  # why this worker cannot read the shard store (failover asked for)
        )
        self.own_store = ""  # the store this worker reads its own shards from (ReadOwn)
        self.announced = (
            False  # this rank told the others the driver is dead (failover by messages)
        )
        self.lost: str | None = None  # why the heartbeat thread knows the driver dead
        self._beater: threading.Thread | None = None
        self.fanin = BeatRelay()  # whom the heartbeat thread beats to (policy/fanin_plan.py)
        self.host = ""
        self._body_cache: tuple[int, Any] = (-1, None)
        self._stopping = False
        self._beating = False
        self.progress = 0  # main-thread steps; read by the heartbeat thread (see Beat)
        self.busy = False  # True while a task is being computed
        self._blas = None
        self._blas_threads: int | None = None  # what ``_blas`` pins the pools to
        self._store_checked: tuple = ((), False)  # ((path, store_id), whether it opens here)
        self.next_due = NEVER  # when the driver's next command is due: just after a reply
        self.replied_at: float | None = None  # when this worker last replied
        self.last_gap: float | None = None  # from its last reply to the next command, the last time
        self.bell = None  # this process's doorbell, when the driver rings it (its host's)
        self.stashed: deque = (
            deque()
        )  # commands read while a task ran (looking for a Skip), served next
        self.skipping: tuple[int, set] = (-1, set())  # (task id, its shards to leave out)
        self.driver_bell = ""  # the driver's doorbell, rung after each reply (the same host only)

    # -- messaging -------------------------------------------------------------
    def _check_alive(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            die(RECONFIG_TIMEOUT, "reconfiguration overran its deadline")

    def driver_dead(self, why: str) -> None:
        """Main thread: the driver is known dead; follow it (failover) or end this worker."""
        if self.failover:
            raise DriverLost(why)
        die(DRIVER_LOST, why)

    @probes.spanned("worker_recv")
    def recv(self) -> tuple:
        backoff = Backoff(window=self.next_due, bell=self.bell, rung=self.bell is not None)
        while True:
            if self.lost is not None:
                self.driver_dead(self.lost)
            if self.setup_by is not None:
                self._check_setup_due()
            if self.stashed:
                return self.stashed.popleft()
            try:
                msg = self.link.poll(TAG_CMD)
            except PeerFailed as exc:
                self.driver_dead(f"lost the driver ({exc})")
            if msg is not None:
                self.last_driver = time.monotonic()
                if self.replied_at is not None:
                    self.last_gap, self.replied_at = self.last_driver - self.replied_at, None
                return msg
            backoff.sleep()

    def _check_setup_due(self) -> None:
        """A replacement before its Setup (no heartbeats yet): end it once its driver's
        process is gone (looked at every 0.2 s, on the driver's host), or at its deadline."""
        now = time.monotonic()
        if self.parent is not None and now >= self._parent_look:
            self._parent_look = now + 0.2
            if not procs.running(self.parent):
                die(
                    DRIVER_LOST,
                    f"the driver (pid {self.parent[0]}) died before it set this replacement up",
                )
        if now > self.setup_by:
            die(
                NEVER_STARTED,
                "a replacement heard nothing from the driver since it joined, within "
                "startup_timeout (its driver died, or lost it): it ends",
            )

    def send_ahead(self, obj: Any) -> None:
        """Post ``obj`` to the driver and ring it, without waiting for the send to complete
        (the next ``reply`` waits for every send)."""
        try:
            self.link.post(obj, TAG_REPLY)
            if self.driver_bell:
                self.link.progress()  # MPI moves a small message on at a progress call: the ring comes after it
                if not self.bell.ring(self.driver_bell):  # unreachable after all: poll as elsewhere
                    self.bell, self.driver_bell = None, ""
        except PeerFailed as exc:
            self.driver_dead(f"lost the driver while replying ({exc})")

    def reply(self, obj: Any) -> None:
        backoff = Backoff(window=next_task_window(time.monotonic()))
        self.send_ahead(obj)
        try:
            while not self.link.progress():
                if self.lost is not None:  # a send to a dead driver may never complete (MPICH)
                    self.driver_dead(self.lost)
                backoff.sleep()
        except PeerFailed as exc:
            self.driver_dead(f"lost the driver while replying ({exc})")
        self.replied_at = time.monotonic()
        self.next_due = next_task_window(self.replied_at, self.last_gap)

    # -- heartbeat thread --------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        seq = 0
        while not self._stopping:
            with self.lock:
                link = self.link
                try:
                    fanin = self.fanin
                    fanin.on(link)
                    fanin.beat(
                        link,
                        Beat(
                            self.worker_id,
                            self.incarnation,
                            seq,
                            self.progress,
                            self.busy,
                            fanin.report(),
                        ),
                    )
                    for msg in link.drain(TAG_HB, comm=link.hb):  # every answer: most are None
                        self.last_driver = time.monotonic()
                        if isinstance(msg, Fence):
                            fence(msg)
                        elif isinstance(msg, Quiet):
                            self.quiet_until = max(self.quiet_until, time.monotonic() + msg.seconds)
                        else:
                            fanin.take(msg)
                    relayed = fanin.exchange(link, time.monotonic() - self.last_driver)
                    if relayed is not None:  # a member hears the driver through its relay
                        self.last_driver = max(self.last_driver, time.monotonic() - relayed)
                    if agrees_by_messages(self.failover) and peer_says_driver_dead(link.comm):
                        if self._lost_driver("told", "another worker saw the driver die"):
                            return
                except (PeerFailed, MPI.Exception) as exc:
                    if self._lost_driver(
                        "failed", f"lost the driver on the heartbeat channel ({exc})"
                    ):
                        return
            seq += 1
            silent = time.monotonic() - self.last_driver
            if silent > driver_silence_limit(
                self.driver_timeout, self.last_driver, self.quiet_until
            ):
                self._lost_driver("silent", f"heard nothing from the driver for {silent:.1f} s")
            if silent > DRIVER_GONE_AFTER_BEATS * self.period and self._driver_gone():
                if self._lost_driver(
                    "gone",
                    f"the driver process (pid {self.driver_proc[1]}) is gone; "
                    f"silent for {silent:.1f} s",
                ):
                    return
            self._check_alive()
            time.sleep(
                self.period / 2 if self.fanin.relaying else self.period
            )  # a relay's news is one hop late

    def _lost_driver(self, cause: str, why: str) -> bool:
        """Heartbeat thread: tell the main thread to follow the driver (True: stop beating),
        or end this worker when failover is off or the driver may be alive (policy/failover_plan.py)."""
        if not (self.failover and takes_over_on(cause)):
            die(DRIVER_LOST, why)
        if agrees_by_messages(
            self.failover
        ):  # at once, so that a worker still computing counts as alive
            announce(self.link.comm)
            self.announced = True
        self.lost = why
        return True

    def stop_heartbeats(self, wait: float) -> None:
        """End the heartbeat thread (before this worker leaves its communicators)."""
        self._stopping = True
        if self._beater is not None:
            self._beater.join(wait)

    def _driver_gone(self) -> bool:
        """The driver's process has ended (in this pid space only: elsewhere, a container that
        shares this host name included, only driver_timeout tells)."""
        host, pid, start = self.driver_proc
        return (
            bool(pid)
            and host == self.host
            and self.driver_space == procs.pid_space() != ""
            and procs.ended(pid, start)
        )

    # -- commands ----------------------------------------------------------------
    def start_heartbeats(self, period: float, driver_timeout: float) -> None:
        """From now on the driver hears this worker, and a silent driver ends it."""
        self.period, self.driver_timeout = period, driver_timeout
        self.last_driver = time.monotonic()
        if not self._beating:
            self._beating = True
            self._beater = threading.Thread(
                target=self._heartbeat_loop, daemon=True, name="mixle-mpi-heartbeat"
            )
            self._beater.start()

    def setup(self, cfg: Setup) -> None:
        self.setup_by = None  # heartbeats from now on
        if self.birth_record:  # the driver read it when its Spawn returned, before this Setup
            birth.remove(self.birth_record)
            self.birth_record = None
        self.worker_id = _who["rank"] = cfg.worker
        self.incarnation = cfg.incarnation
        self.encoder = pickle.loads(cfg.encoder)  # nosec B301 - IPC from this job's own driver
        self.encoder_pickled = cfg.encoder  # a successor (failover) sets up the others with it
        self.sub_chunks = cfg.sub_chunks
        self.engine = cfg.engine
        warm_engine(cfg.engine)  # before Ready: a kernel's compile is never in a round
        self.reconfigure_timeout = cfg.reconfigure_timeout
        if (
            cfg.blas_threads != self._blas_threads
        ):  # a spare set up again to adopt a place keeps its pin
            self._blas, self._blas_threads = pin_blas_threads(cfg.blas_threads), cfg.blas_threads
        retain_freed_memory()  # E-step temporaries reuse heap pages instead of faulting fresh ones
        self.faults = FaultInjector(parse_plan(cfg.fault_plan), self.worker_id, self.incarnation)
        self.driver_proc = (cfg.driver_host, cfg.driver_pid, cfg.driver_start)
        self.driver_space = cfg.driver_space
        # a replacement is not in the survivors' communicator: it never follows a dead driver
        how = cfg.failover if not self.spawned else ""
        no_failover = self.store_unreadable = (
            can_take_over(cfg.store_path, os.access(cfg.store_path, os.R_OK)) if how else ""
        )
        self.failover_how = "" if no_failover else how
        self.failover = self.failover_how if cfg.armed else ""
        self.host = host_and_pid()[0]
        # A driver on this host rings this worker after each command, and is rung after each reply.
        self.bell = doorbell.own() if cfg.driver_bell and cfg.driver_host == self.host else None
        self.driver_bell = cfg.driver_bell if self.bell is not None else ""
        self.start_heartbeats(cfg.heartbeat_period, cfg.driver_timeout)
        if self.spawned:
            self.faults.check("respawn")
        self.own_store = (
            cfg.store_path
            if cfg.own_store and self._opens_store(cfg.store_path, cfg.own_store)
            else ""
        )
        host, pid = host_and_pid()
        me = procs.identity(pid)
        self.reply(
            Ready(
                self.worker_id,
                host,
                pid,
                no_failover,
                bool(self.own_store),
                me[1] if me else "",
                self.bell.address if self.bell is not None else "",
                procs.pid_space(),
                numerics.report(),
            )
        )

    def _opens_store(self, path: str, store_id: str) -> bool:
        """``storage.opens_store``, asked once per store: opening the HDF5 file takes
        milliseconds, and a spare adopting a place is set up again while the fit waits."""
        if self._store_checked[0] != (path, store_id):
            self._store_checked = ((path, store_id), opens_store(path, store_id))
        return self._store_checked[1]

    def read_own(self, shards) -> None:
        """Read, encode and keep ``shards`` from the store; what cannot be read is said, and
        the driver sends it instead."""
        try:
            store = ShardStore.open(self.own_store)
        except Exception as exc:  # noqa: BLE001 - every shard goes back to the driver's streaming
            for sid in shards:
                self.reply(Loaded(sid, 0, f"{type(exc).__name__}: {exc}"))
            return
        with store:
            for sid in shards:
                try:
                    rows = store.read_rows(sid)
                except Exception as exc:  # noqa: BLE001
                    self.reply(Loaded(sid, 0, f"{type(exc).__name__}: {exc}"))
                    continue
                self.load_started()
                self.progress += 1
                self.resident[sid] = estep.encode_shard(self.encoder, rows, self.sub_chunks)
                self.reply(Loaded(sid, len(rows)))

    def load_started(self) -> None:
        """The first shard of a load is in: the ``load`` fault phase fires here once per load."""
        if not self._in_load:
            self._in_load = True
            self.faults.check("load", self.loads)
            self.loads += 1

    @probes.spanned("worker_body")
    def _body(self, task_id: int, body_pickled: bytes) -> Any:
        if self._body_cache[0] != task_id:
            self._body_cache = (task_id, pickle.loads(body_pickled))  # nosec B301 - IPC from this job's own driver
        return self._body_cache[1]

    @probes.spanned("worker_task")
    def task(self, t: Task) -> None:
        task_id, kind, call, items = t.task_id, t.kind, t.call, t.items
        recovery = any(rows is not None for _, rows, _ in items)
        phase = {"estep": "estep_before", "init": "init", "llsum": "llsum"}[kind]
        if t.score_call >= 0:  # the scoring call this E-step task also serves comes first
            self.faults.check("llsum", t.score_call, recovery)
        self.faults.check(phase, call, recovery)
        body = self._body(task_id, t.body)
        scores = t.score_call >= 0  # the same model object for both, as mixle's own EM loop uses it
        mid_pending = [kind == "estep"]

        def on_chunk(_index: int) -> None:
            self.progress += 1  # the heartbeat tells the driver this main thread moves
            if mid_pending[0]:  # "estep_mid": after the task's first sub-chunk
                mid_pending[0] = False
                self.faults.check("estep_mid", call, recovery)

        batch: list = []
        seconds: list[float] = []
        flushed = time.monotonic()
        if (
            self.skipping[0] != task_id
        ):  # a Skip read during an earlier task of this round still holds
            self.skipping = (task_id, set())
        skipped = self.skipping[1]
        for sid, rows, extra in items:
            skip = sid in skipped or sid in self._skips(
                task_id, skipped
            )  # a copy of it won elsewhere
            if skip and not (t.keep and rows is not None):
                continue
            t0 = time.perf_counter()
            chunks = (
                self.resident[sid]
                if rows is None
                else estep.encode_shard(self.encoder, rows_from_packed(rows), self.sub_chunks)
            )
            if t.keep and rows is not None:
                self.resident[sid] = (
                    chunks  # the next rounds (a replacement joining) or an adoption need no load
                )
            if skip:  # a recovered shard: kept for the next rounds, not computed
                continue
            ahead = self._stats_ahead(task_id, sid, call, recovery) if scores else None
            batch.append(
                (
                    sid,
                    estep.shard_result(
                        kind, body, chunks, extra, scores, on_chunk, ahead, self.engine
                    ),
                )
            )
            self._slowed(time.perf_counter() - t0)
            seconds.append(time.perf_counter() - t0)
            if time.monotonic() - flushed >= REPLY_BATCH_SECONDS:
                self.reply(
                    Result(task_id, batch, peak_rss_mb(), tuple(seconds))
                )  # the peak for summary.json
                batch, seconds, flushed = [], [], time.monotonic()
        if batch:
            self.reply(Result(task_id, batch, peak_rss_mb(), tuple(seconds)))
        if kind == "estep":
            self.faults.check("estep_after_reply", call, recovery)

    def _skips(self, task_id: int, skipped: set) -> set:
        """The shards of task ``task_id`` the driver said to leave out (``Skip``), read between
        shards without waiting; any other command read meanwhile is served after the task."""
        while True:
            try:
                msg = self.link.poll(TAG_CMD)
            except PeerFailed as exc:
                self.driver_dead(f"lost the driver ({exc})")
            if msg is None:
                return skipped
            self.last_driver = time.monotonic()
            if isinstance(msg, Skip):
                if (
                    msg.task_id == task_id
                ):  # a task of this round stashed behind this one shares the set
                    skipped.update(msg.shards)
            else:
                self.stashed.append(msg)

    def _slowed(self, seconds: float) -> None:
        """The ``slow`` chaos action: this shard takes ``slowdown`` times as long, the main
        thread's progress ticking meanwhile (alive and slow, never stalled)."""
        extra = seconds * (self.faults.slowdown - 1.0)
        end = time.perf_counter() + extra
        while extra > 0 and (left := end - time.perf_counter()) > 0:
            time.sleep(min(left, 0.02))
            self.progress += 1

    def _stats_ahead(self, task_id: int, sid: int, call: int, recovery: bool) -> estep.Ahead:
        """For a shard of a task that also scores: its E-step payload goes to the driver at
        once when small (``Stats``), to be folded while this worker computes the scores."""

        def ahead(payload: bytes) -> bool:
            if len(payload) > STATS_AHEAD_MAX_BYTES:
                return False
            self.send_ahead(Stats(task_id, sid, payload))
            self.faults.check("stats_sent", call, recovery)
            return True

        return ahead

    def reach(self, msg: Reach) -> None:
        """Failover: arm, unless the store or the file the driver wrote beside its checkpoint
        cannot be read here (then a dead driver ends this worker, as without failover)."""
        why = self.store_unreadable or (
            can_take_over(os.path.dirname(msg.path), os.path.exists(msg.path), msg.what)
            if self.failover_how
            else ""
        )
        self.failover = "" if why else self.failover_how
        self.reply(Reached(self.worker_id, why))

    def do_shrink(self, order: Shrink) -> None:
        while True:
            self.reply(ShrinkReady(order.epoch, self.worker_id))
            msg = self.recv()
            if isinstance(msg, Shrink):  # a newer order (another failure meanwhile) replaces it
                order = msg
                continue
            if isinstance(msg, Stop):
                self.stop()
            if isinstance(msg, Abort):
                quit_on_abort(msg)
            if not isinstance(msg, ShrinkGo) or msg.epoch != order.epoch:
                raise RuntimeError(f"expected ShrinkGo for epoch {order.epoch}, got {msg!r:.200}")
            break
        epoch, ranks, method = order.epoch, order.ranks, order.method
        self.deadline = time.monotonic() + self.reconfigure_timeout
        old = self.link
        # In a helper thread: a member that died inside an emulated shrink (MPICH) blocks it for
        # good, and with it every MPI call of the heartbeat thread, which could not end us.
        comm = self._bounded(lambda: shrink(old.comm, ranks, method, epoch), "the shrink")
        if self.failover:
            if not driver_in(
                old.comm, comm
            ):  # the driver died inside the shrink: follow it from here
                self.deadline = None
                with self.lock:
                    self.link = Link(comm, old.hb, 0)
                raise DriverLost("the driver died while the job reconfigured")
        hb = self._bounded(comm.Dup, "the heartbeat communicator's Dup")
        with self.lock:
            self.link = Link(comm, hb, 0)
        self.deadline = None
        self.reply(Shrunk(epoch, self.worker_id))

    def _bounded(self, call, what: str):
        """``call()``, or the end of this worker once ``self.deadline`` passed."""
        try:
            return run_with_deadline(call, max(0.0, self.deadline - time.monotonic()), what)
        except TimeoutError as exc:
            die(RECONFIG_TIMEOUT, f"reconfiguration overran its deadline ({exc})")

    def stop(self) -> None:
        self._stopping = True
        if self.spawned:
            self._finalize_spawned()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    def _finalize_spawned(self) -> None:
        """A spawned process must disconnect from its parent and finalize, or Open MPI
        reports it as exiting improperly. Bounded: past the deadline it just exits."""
        time.sleep(2 * self.period)  # let the heartbeat thread see _stopping

        def finalize() -> None:
            with self.lock:
                try:
                    self.link.hb.Free()
                    self.link.comm.Free()
                    self.link.inter.Disconnect()
                    MPI.Finalize()
                except MPI.Exception:
                    pass

        try:
            run_with_deadline(finalize, self.reconfigure_timeout, "disconnect and finalize")
        except TimeoutError as exc:
            sys.stderr.write(
                f"[mixle_mpi] respawned worker pid {os.getpid()}: {exc}; exiting anyway\n"
            )

    def serve(self) -> None:
        """Answer the driver until it says stop; never returns."""
        while True:
            msg = self.recv()
            self.progress += 1
            if not isinstance(msg, (Load, ReadOwn)):
                self._in_load = False  # any other command ends a load
            try:
                if isinstance(msg, Setup):
                    self.setup(msg)
                elif isinstance(msg, Load):  # a shard arrives in parts; encode it once complete
                    rows = self._loading.setdefault(msg.shard, [])
                    rows.extend(rows_from_packed(msg.packed))
                    self.load_started()
                    if msg.last:
                        del self._loading[msg.shard]
                        self.resident[msg.shard] = estep.encode_shard(
                            self.encoder, rows, self.sub_chunks
                        )
                        self.reply(Loaded(msg.shard, len(rows)))
                elif isinstance(msg, ReadOwn):
                    self.read_own(msg.shards)
                elif isinstance(msg, Task):
                    self.busy = True
                    try:
                        self.task(msg)
                    finally:
                        self.busy = False
                elif isinstance(msg, Release):
                    for sid in msg.shards:
                        self.resident.pop(sid, None)
                elif isinstance(msg, Skip):
                    pass  # its task had ended: nothing to leave out
                elif isinstance(msg, Reach):
                    self.reach(msg)
                elif isinstance(msg, Shrink):
                    self.do_shrink(msg)
                elif isinstance(msg, Stop):
                    self.stop()
                elif isinstance(msg, Abort):
                    quit_on_abort(msg)
                else:
                    raise RuntimeError(f"unknown command {msg!r:.200}")
            except DriverLost:
                raise
            except Exception as exc:  # noqa: BLE001 - a worker-side bug is reported to the driver
                host, pid = host_and_pid()
                task_id = msg.task_id if isinstance(msg, Task) else None
                self.reply(
                    TaskError(
                        task_id, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}", host, pid
                    )
                )


def fence(msg: Fence) -> None:
    """Heartbeat thread: kill a failed worker's process on this host for the driver, if it is
    still that process (its start time matches: the pid was not reused)."""
    if not procs.kill_same((msg.pid, msg.started)):
        return  # gone already, or the pid names another process now: nothing is signalled
    logs.get("worker").warning(
        f"worker rank {_who['rank']} (pid {os.getpid()}): fenced failed worker "
        f"{msg.worker} (pid {msg.pid}) on this host for the driver"
    )


def quit_on_abort(msg: Abort) -> None:
    """The driver ends the job and has said why itself: exit with its code, silently."""
    flush_and_exit(msg.code)


def flush_and_exit(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def serve_forever(link: Link, spawned: bool, worker: Worker | None = None) -> None:
    """Ignore SIGUSR1 (Hydra sends it to survivors) and SIGINT (Ctrl-C is the driver's to
    act on: it checkpoints and ends every rank), and answer the driver; never returns."""
    for name in ("SIGUSR1", "SIGINT"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    (worker or Worker(link, spawned)).serve()


def serve_original(world, following: bool = False):
    """An original worker rank: the startup handshake (see startup.py), then serve. Returns
    only with failover on, to the rank that takes over from a dead driver (a Takeover);
    ``following``: this is the handshake with such a successor (no startup faults)."""
    from mixle_mpi.runtime import startup

    timeout = contract.startup_timeout()
    rank = _who["rank"] = world.Get_rank()
    faults = _startup_faults(rank) if not following else FaultInjector((), rank, 0)
    faults.check("startup")
    try:
        answer = startup.wait_for_go(world, timeout)
    except MPI.Exception as exc:
        die(DRIVER_LOST, f"lost the driver while the job started ({exc})")
    if answer is None:
        die(
            NEVER_STARTED,
            f"heard nothing from the driver (rank 0) for startup_timeout={timeout:g} s "
            f"while the job started (set {contract.STARTUP_TIMEOUT_ENV} to wait longer)",
        )
    if isinstance(answer, Abort):
        flush_and_exit(answer.code)
    if rank not in answer.members:
        die(
            0,
            f"rank {rank} was left out: the driver did not hear from it within startup_timeout="
            f"{timeout:g} s; the job goes on without it",
        )
    faults.check("handshake")
    try:
        comm, hb = startup.build_comms(
            world, answer.members, timeout, None if following else startup.RanksGone()
        )  # world ranks at the start only
    except startup.StartupFailed as exc:
        die(NEVER_STARTED, str(exc))
    detached = (
        startup.detach_from_slurm_pmix()
    )  # srun --mpi=pmix: a later death must not end the step
    startup.release_mpich_shm()  # MPICH: no /dev/shm segment outlives the job (no MPI_Finalize here)
    if detached is not None:
        logs.get("worker").debug(f"rank {rank}: {detached}")
    worker = Worker(Link(comm, hb, 0), spawned=False)
    worker.worker_id = rank
    worker.start_heartbeats(answer.heartbeat_period, answer.driver_timeout)
    try:
        serve_forever(worker.link, False, worker)
    except DriverLost as lost:
        return follow(worker, str(lost))


def follow(worker: Worker, why: str):
    """The driver is dead and failover is on: agree on the survivors with the others, then
    take over (rank 0 of their communicator: return the Takeover) or serve the one that does."""
    log = logs.get("worker")
    log.warning(
        f"worker rank {worker.worker_id} (pid {os.getpid()}): {why}; agreeing on a new driver with the survivors"
    )
    worker.stop_heartbeats(2 * worker.period)
    try:
        taken = agree(
            worker.link.comm,
            worker.failover,
            election_window(worker.period),
            worker.reconfigure_timeout,
            worker.announced,
            worker.worker_id,
            worker.driver_proc,
            worker.encoder_pickled,
            why,
        )
    except (NoAgreement, TimeoutError, MPI.Exception) as exc:
        die(RECONFIG_TIMEOUT, f"the survivors of the driver did not agree ({exc})")
    if successor(range(taken.survivors)) == taken.comm.Get_rank():
        log.warning(
            f"worker rank {worker.worker_id} (pid {os.getpid()}): taking over as the driver of "
            f"{taken.survivors} rank(s)"
        )
        return taken
    return serve_original(taken.comm, following=True)


def _startup_faults(rank: int) -> FaultInjector:
    """This rank's startup faults from the environment, less those the fault log says fired
    already: a job launched again after it never started meets each fault once. A bad plan
    is the driver's to report."""
    from mixle_mpi.chaos.fault_plan import STARTUP_PHASES, pending_from_env

    return FaultInjector(pending_from_env(STARTUP_PHASES), rank, 0)


def serve_spawned(
    parent, birth_record: str | None = None, driver: tuple[int, str] | None = None
) -> None:
    """A respawned worker: merge with the driver (under a deadline), then serve.
    ``birth_record``: where it wrote its birth record, removed once the driver has read it."""

    timeout = contract.startup_timeout()
    try:
        pair = run_with_deadline(lambda: parent.Merge(high=True), timeout, "merge with the driver")
        hb = run_with_deadline(pair.Dup, timeout, "heartbeat communicator")
    except (TimeoutError, MPI.Exception) as exc:
        die(NEVER_STARTED, f"a respawned worker could not join the driver: {exc}")
    link = Link(pair, hb, 0, inter=parent)
    serve_forever(
        link,
        spawned=True,
        worker=Worker(link, True, birth_record, setup_within=timeout, driver=driver),
    )
