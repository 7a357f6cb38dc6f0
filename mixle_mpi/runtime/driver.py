"""Rank 0: places shards, runs rounds, detects failures and recovers exactly.

Decisions come from the pure modules (membership, placement); this class carries them out
over MPI, its messages through its mailroom (``mailroom.Mailroom``). Two parts of it live
in modules of their own: the arrival of replacements and adopted spares
(``arrivals.Arrivals``) and the reshaping after failures (``reconfiguring.Reconfiguring``).
A round dispatches one task per live worker over its resident shards, accepts a shard's
result only from the worker it is currently assigned to, and recomputes the shards of any
worker that fails on survivors from the HDF5 shard store. Reconfiguration (shrink,
respawn, blacklist, migration) happens between rounds, when every worker is idle.
"""

from __future__ import annotations

import os
import pickle
import time
from typing import Any

from mpi4py import MPI

from mixle_mpi.chaos.fault_actor import FaultInjector
from mixle_mpi.chaos.fault_plan import plan_to_json
from mixle_mpi.core import clock, estep, logs, numerics, probes, procs
from mixle_mpi.core.deadlines import run_with_deadline
from mixle_mpi.core.engine import warm as warm_engine
from mixle_mpi.core.errors import NoWorkersLeft
from mixle_mpi.core.malloc import retain_freed_memory
from mixle_mpi.core.protocol import (
    Abort,
    Fence,
    Load,
    Loaded,
    Reach,
    Reached,
    ReadOwn,
    Ready,
    Release,
    Setup,
    Stop,
)
from mixle_mpi.core.settings import Settings
from mixle_mpi.policy import numerics_plan
from mixle_mpi.policy.membership import Membership
from mixle_mpi.policy.placement import driver_share, own_readers
from mixle_mpi.policy.places import Places
from mixle_mpi.policy.rebalance_plan import Rebalancer
from mixle_mpi.policy.speculation_plan import Paces
from mixle_mpi.policy.suspicion import Look, Suspicions
from mixle_mpi.runtime.arrivals import Arrivals
from mixle_mpi.runtime.mailroom import Mailroom
from mixle_mpi.runtime.monitor import Monitor
from mixle_mpi.runtime.reconfiguring import Reconfiguring
from mixle_mpi.runtime.round import Round
from mixle_mpi.runtime.transport import ABORT_SEND_WAIT
from mixle_mpi.runtime.wiring import Wiring
from mixle_mpi.storage.events import EventLog
from mixle_mpi.storage.store import ShardStore, rows_from_packed

STOP_SEND_WAIT = 5.0  # seconds for "stop" messages to leave at the end
DISCONNECT_TIMEOUT = 10.0  # seconds for one respawned worker's Disconnect at exit


class Driver:
    def __init__(
        self,
        group_comm,
        ranks: dict[int, int],
        workers: int,
        monitor: Monitor,
        store: ShardStore,
        encoder_pickled: bytes,
        sub_chunks: int,
        max_retries: int,
        settings: Settings,
        events: EventLog,
        fault_plan,
        shrink_method: str,
        wiring: Wiring,
        spares: int = 0,
        failover: str = "",
    ) -> None:
        self.store = store
        self.num_shards = store.num_shards
        self.encoder_pickled = encoder_pickled
        self.failover = (
            failover  # how the workers agree on a dead driver's successor (Setup.failover)
        )
        self.armed = False  # failover armed by reach(): a checkpoint is being written
        self.unreached: set[int] = set()  # workers that cannot read the checkpoint's folder
        self.sub_chunks = sub_chunks
        self.settings = settings
        self.events = events
        self.fault_plan_json = plan_to_json(fault_plan)
        self.faults = FaultInjector(fault_plan, 0, 0)  # the driver's own chaos (rank 0)
        self.shrink_method = shrink_method
        self.body_pickled = b""  # the last round's pickled body
        self.arrivals = Arrivals(self, settings, wiring.spawner)
        self.reconfiguring = Reconfiguring(self)
        self.host = wiring.host
        self.space = (
            procs.pid_space()
        )  # this process's pid space: a worker's pid is ours to signal only in it
        self.spaces: dict[int, str] = {}  # worker -> its pid space (Ready.space, a birth record)
        # this process for good (a worker on this host tells it from a reused pid)
        self.identity = procs.own() or (os.getpid(), "")

        self.group_comm = group_comm
        # Worker ids are the world ranks 1..workers, whoever came up: a rank left out at
        # startup is placed like the others and then recovered as a failed worker. The last
        # ``spares`` ids are spares: places with no shard until one adopts a failed place.
        ids = list(range(1, workers + 1))
        holders = ids[: len(ids) - spares]
        self.membership = Membership(ids, max_retries)
        self.group_ranks = dict(ranks)  # original-group members: rank in group_comm
        self.mail = Mailroom(dict(wiring.links), wiring.bell, self.fail, wiring.idle)
        self.info: dict[int, tuple[str, int]] = {}  # worker -> (host, pid)
        self.reads_store: set[int] = set()  # workers that read their own shards (Ready.reads_store)
        self.started_at: dict[int, str] = {}  # worker -> its process's start time (Ready.started)
        self.numerics = numerics.report()  # the job's numerics: a worker of others gets no shard
        self.probes: dict[int, str] = {}  # worker -> its numerics probe (Ready.numerics)
        self.read_own: set[int] = set()  # the workers that read their own shards at the last load
        # who owns which shard, the driver's own and the copies kept for a place (policy/places)
        self.places = Places(
            self.num_shards, holders, ids[len(holders) :], self._driver_share(len(holders))
        )
        self.here_chunks: dict[int, Any] | None = None  # encoded at the first round
        self.pending: set[int] = set()  # failed since the last reconfiguration
        self.calls = {"estep": 0, "init": 0, "llsum": 0}
        self.monitor = monitor  # started by the handle at the handshake
        self.rounds: list[dict[str, Any]] = []
        self.round_seconds: dict[
            str, float
        ] = {}  # kind -> the last round's dispatch-to-results time
        self.paces = Paces()  # each place's seconds per shard (policy/speculation_plan.py)
        self.suspicions = Suspicions(settings.suspect_max_wait)  # silent, not yet failed
        self.rebalancer = (
            Rebalancer()
        )  # speed-aware placement between rounds (policy/rebalance_plan.py)
        self.started = False  # every worker set up and loaded once
        self.closed = False

    # -- failure handling ------------------------------------------------------
    def fail(self, worker: int, cause: str, detected_at: float | None = None) -> None:
        """Fence a failed worker: stop listening, kill it if it is ours to kill, queue recovery."""
        if worker not in self.membership.records or not self.membership.mark_failed(worker):
            return  # a retired spare's old id, or a duplicate report
        self.monitor.forget(worker)
        self.mail.forget(worker)
        self.paces.forget(worker)  # its next process is another one
        self.arrivals.forget(worker)
        self.places.drop_holder(worker)
        self.suspicions.forget(worker)
        host, pid = self.info.get(worker, (None, None))
        fenced, fenced_by = False, None
        here = self._here(worker)
        if pid is not None and not here and self.started_at.get(worker):
            fenced_by = self.membership.fencer(  # a pid means something only in its pid space
                host, worker, self.spaces.get(worker, ""), self.spaces
            )
            if fenced_by is not None and fenced_by in self.mail.links:
                self.monitor.send(fenced_by, Fence(pid, self.started_at[worker], worker))
            else:
                fenced_by = None
        if here:
            self.arrivals.spawner.fenced(worker, pid)
            fenced = self._fence_here(worker, pid)
        self.pending.add(worker)
        rec = self.membership.records[worker]
        self.events.emit(
            "failure_detected",
            worker=worker,
            host=host,
            pid=pid,
            cause=cause,
            failures=rec.failures,
            incarnation=rec.incarnation,
            detected_at=detected_at or time.time(),
            fenced=fenced,
            **({"fenced_by": fenced_by} if fenced_by is not None else {}),
        )

    def _fence_here(self, worker: int, pid: int) -> bool:
        """SIGKILL ``worker``'s process on this host, only if ``pid`` still names the process
        that started at the time it reported (``procs.kill_same``): a reused pid is refused,
        with a line that says so. True once that process is surely gone."""
        started = self.started_at.get(worker)
        outcome = (
            procs.kill_same((pid, started)) if started else (None if procs.gone(pid) else False)
        )
        if outcome is False:
            logs.get("driver").warning(
                f"not fencing worker {worker}: pid {pid} no longer names its process "
                f"(started {started or 'unknown'}); nothing was signalled"
            )
        return outcome is not False

    def _here(self, worker: int) -> bool:
        """``worker``'s process is on this host, in this pid space: ours to look at and kill."""
        host, pid = self.info.get(worker, (None, None))
        return pid is not None and host == self.host and self.spaces.get(worker) == self.space != ""

    def _look(self, worker: int) -> Look | None:
        """``worker``'s process as the process table shows it (None: not here to look at)."""
        started = self.started_at.get(worker)
        if self.settings.suspect_max_wait <= 0 or not started or not self._here(worker):
            return None
        return Look(*procs.look((self.info[worker][1], started)))

    def check_failures(self) -> None:
        """Fail the workers reported failed, once confirmed (policy/suspicion.py): a silent
        worker whose process is alive is suspected first and given more time."""
        now = clock.monotonic()
        for worker, (cause, when) in sorted(self.monitor.take_suspects().items()):
            verdict = self.suspicions.judge(worker, cause, self._look(worker), now)
            if verdict.confirm:
                self.fail(worker, cause + verdict.why, when)
            else:
                self.monitor.extend(worker)
                self.events.emit("suspected", worker=worker, cause=cause, why=verdict.why)
        if self.suspicions.open:
            for worker, s in self.suspicions.cleared(self.monitor.heard_since).items():
                self.events.emit(
                    "suspicion_cleared",
                    worker=worker,
                    seconds=round(now - s.since, 3),
                    looks=s.looks,
                )

    def live(self) -> list[int]:
        """The workers that compute this round (a replacement still joining does not)."""
        return [
            w
            for w in self.membership.live()
            if w in self.mail.links and not self.arrivals.is_joining(w)
        ]

    def _reachable(self) -> list[int]:
        """Every worker process to stop at the end: the live ones and those still joining."""
        joining = {w for w in self.arrivals.joining_places() if w in self.mail.links}
        return sorted(set(self.live()) | joining)

    @property
    def contention(self) -> float:
        """How many of this job's ranks share each core of the driver's host (at least 1): a
        rank that shares a core looks this much slower without being slow, so speculation
        and placement ask that much more of a straggler (policy/speculation_plan.py)."""
        here = 1 + sum(1 for w in self.live() if self.info.get(w, ("",))[0] == self.host)
        return max(1.0, here / (self.settings.cores or procs.usable_cores()))

    def live_processes(self) -> dict[int, int]:
        """Each live worker's current incarnation: which process may answer for it."""
        return {w: self.membership.records[w].incarnation for w in self.live()}

    def reconfigure(self) -> list[int]:
        """Between rounds: recover from the failures since the last time (``reconfiguring``);
        returns the workers blacklisted now."""
        return self.reconfiguring.reconfigure()

    # -- waiting for replies -----------------------------------------------------
    def collect(
        self, expect: dict[int, set], what: str, watch: dict | None = None
    ) -> dict[int, list]:
        """Wait until each expected worker sent the replies whose ``key`` is expected (for
        example ``(Ready, worker)``), or failed. Returns the replies per worker; failed
        workers are simply absent.

        Control replies have a deadline (``reconfigure_timeout``): a worker whose heartbeat
        thread lives on while its main thread never answers is hung, and is failed.
        ``watch``: worker -> the identity (pid, start) of its process on this host, failed as
        soon as that process has ended (a replacement with no heartbeat verdict yet)."""
        got: dict[int, list] = {w: [] for w in expect}
        waiting = {w: set(keys) for w, keys in expect.items() if keys}
        deadline = [clock.monotonic() + self.settings.reconfigure_timeout]
        watch = dict(watch or {})

        def step() -> bool | None:
            if not waiting:
                return None
            for w, ident in list(watch.items()):
                if w in waiting and not procs.running(ident):
                    watch.pop(w)
                    self.fail(w, f"its process (pid {ident[0]}) ended before its {what!r} reply")
            if clock.monotonic() > deadline[0]:
                for w in sorted(waiting):
                    self.fail(
                        w,
                        f"no {what!r} reply within reconfigure_timeout="
                        f"{self.settings.reconfigure_timeout:g} s (hung)",
                    )
                deadline[0] = float("inf")
            progressed = False
            for w in list(waiting):
                for msg in self.mail.drain(w):
                    key = getattr(msg, "key", None)
                    if key in waiting.get(w, ()):
                        waiting[w].discard(key)
                        got[w].append(msg)
                        progressed = True
                if not waiting.get(w):
                    waiting.pop(w, None)
            self.check_failures()
            for w in list(waiting):
                if not self.membership.is_live(w) or w not in self.mail.links:
                    waiting.pop(w)
                    got.pop(w, None)
            return progressed

        self.mail.wait(step)
        return got

    # -- startup -----------------------------------------------------------------
    def start(self, excluded: dict[int, str] | None = None) -> None:
        """Set up and load the live workers; ``excluded`` ranks (left out at startup, with
        why) fail now and are respawned or have their shards migrated like any failure."""
        t0 = time.perf_counter()
        for w, why in sorted((excluded or {}).items()):
            self.fail(w, f"startup: {why}")
        self._setup(self.live())
        warm_engine(self.settings.engine)  # the workers did before Ready; from their cache here
        t_setup = time.perf_counter()
        self.load({w: self.places.of(w) for w in self.live()})
        self.events.emit(
            "loaded",
            workers=len(self.live()),
            shards=self.num_shards,
            read_by_workers=sorted(self.read_own & set(self.live())),
            hosts={w: self.info[w][0] for w in self.live() if w in self.info},
            setup_seconds=round(t_setup - t0, 6),
            load_seconds=round(time.perf_counter() - t_setup, 6),
        )
        self.reconfigure()
        self.started = True

    def setup_message(self, worker: int) -> Setup:
        own = self.store.store_id if self.settings.workers_read_store else ""
        s = self.settings
        return Setup(
            worker=worker,
            incarnation=self.membership.records[worker].incarnation,
            encoder=self.encoder_pickled,
            sub_chunks=self.sub_chunks,
            heartbeat_period=s.heartbeat_period,
            driver_timeout=s.driver_timeout,
            reconfigure_timeout=s.reconfigure_timeout,
            blas_threads=s.blas_threads,
            fault_plan=self.fault_plan_json,
            driver_host=self.host,
            driver_pid=os.getpid(),
            driver_start=self.identity[1],
            failover=self.failover,
            store_path=os.path.abspath(self.store.path) if self.failover or own else "",
            own_store=own,
            armed=self.armed and worker not in self.unreached,
            driver_bell=self.mail.bell.address if self.mail.bell is not None else "",
            driver_space=self.space,
            engine=s.engine,
        )

    def note_ready(self, worker: int, ready: Ready) -> bool:
        """``worker`` is set up: it beats from now on, so a replacement's grace for its
        imports ends here (its loading is covered by heartbeats like everything after).
        False: its numerics are not the driver's, so it failed and gets no shard
        (``numerics_plan.refusal``; a stand-in of the simulation reports none)."""
        refused = ready.numerics and numerics_plan.refusal(
            worker, ready.host, self.numerics, numerics.Numerics(*ready.numerics)
        )
        if refused:
            logs.get("driver").warning(refused)
            self.events.emit("numerics_refused", worker=worker, host=ready.host, why=refused)
            self.arrivals.computed_other_bits_on(ready.host)
            self.fail(worker, f"numerics: {refused}")
            return False
        if ready.numerics:
            self.probes[worker] = ready.numerics[0]
        self.monitor.grace(worker, 0.0)
        self.info[worker] = (ready.host, ready.pid)
        self.started_at[worker] = ready.started
        self.spaces[worker] = ready.space
        (self.reads_store.add if ready.reads_store else self.reads_store.discard)(worker)
        rec = self.membership.records[worker]
        rec.host, rec.pid = ready.host, ready.pid
        self.mail.note_bell(worker, ready.bell)
        if ready.no_failover:  # the others follow a dead driver without it
            self._out_of_failover(worker, ready.no_failover)
        return True

    @probes.spanned("driver_setup")
    def _setup(self, workers: list[int]) -> None:
        for w in workers:
            if self.mail.post(w, self.setup_message(w)):
                self.monitor.watch(w, self.mail.links[w])
        ready = self.collect({w: {(Ready, w)} for w in workers if w in self.mail.links}, "ready")
        for w, msgs in ready.items():
            self.note_ready(w, msgs[0])

    def reach(self, path: str, what: str) -> dict[int, str]:
        """Failover: arm every live worker that reads ``path`` (and the store); the others stay
        out (logged, as at setup). From now on a worker set up is armed at once. Returns the
        workers that stay out, with why."""
        workers = [w for w in self.live() if w in self.mail.links]
        for w in workers:
            self.mail.post(w, Reach(path, what))
        got = self.collect({w: {(Reached, w)} for w in workers if w in self.mail.links}, "reached")
        lost = {w: msgs[0].no_failover for w, msgs in got.items() if msgs[0].no_failover}
        self.unreached &= set(lost)  # each fit asks afresh
        for w, why in lost.items():
            self._out_of_failover(w, why)
        self.armed = True
        self.events.emit(
            "failover_armed", workers=sorted(set(workers) - set(lost)), out=sorted(lost)
        )
        return lost

    def _out_of_failover(self, worker: int, why: str) -> None:
        """``worker`` cannot take over from a dead driver: logged once, and never armed."""
        if worker not in self.unreached:
            host, pid = self.info.get(worker, ("?", 0))
            self.events.emit("failover_unavailable", worker=worker, pid=pid, host=host, reason=why)
        self.unreached.add(worker)

    def load_parts(self, sids: list[int]) -> list[tuple[int, int, int, bool]]:
        """(shard, start, stop, is its last block) for every block of ``sids``, in order."""
        parts = []
        for sid in sids:
            blocks = self.store.blocks(sid)
            parts += [(sid, a, b, k == len(blocks) - 1) for k, (a, b) in enumerate(blocks)]
        return parts

    @probes.spanned("shard_load")
    def load(self, plan: dict[int, list[int]]) -> None:
        """Make shards resident on workers: a worker that opens the store and has enough to
        load reads its own, in parallel with the others (``ReadOwn``, ``placement.own_readers``);
        the driver streams the rest (``_stream``), and any shard a worker could not read.
        Heartbeats cover a loading worker as at any other moment (it is set up: it beats), so
        a death while it loads is found within heartbeat_timeout."""
        readers = own_readers(
            {w: sum(self.store.shard_bytes(s) for s in sids) for w, sids in plan.items()},
            self.reads_store,
            self.settings.own_read_min_bytes,
        )
        own = {w: sids for w, sids in plan.items() if sids and w in readers}
        for w, sids in list(own.items()):
            if not self.mail.post(
                w, ReadOwn(tuple(sids))
            ):  # it failed: streamed to nobody (it is recovered)
                own.pop(w)
        streamed = {w: sids for w, sids in plan.items() if w not in own}
        expect = self._stream(streamed)
        for w, sids in own.items():
            expect.setdefault(w, set()).update((Loaded, sid) for sid in sids)
        got = self.collect(
            {w: keys for w, keys in expect.items() if w in self.mail.links}, "loaded"
        )
        unread: dict[int, list[int]] = {}
        for w, msgs in got.items():
            for m in msgs:
                if isinstance(m, Loaded) and m.unread:
                    unread.setdefault(w, []).append(m.shard)
                    self.reads_store.discard(w)
                    self.events.emit("store_unread", worker=w, shard=m.shard, why=m.unread)
        self.read_own = set(own) - set(unread)
        if unread:
            self.collect(
                {w: keys for w, keys in self._stream(unread).items() if w in self.mail.links},
                "loaded",
            )

    def _stream(self, plan: dict[int, list[int]]) -> dict[int, set]:
        """Send raw shards (read from the store) for workers to encode and keep resident;
        returns the Loaded replies to expect.

        Shards travel in blocks of about 1 MiB, and a worker's next block is read only once
        its previous one was delivered, so the driver holds at most one block per worker
        whatever the size of the data."""
        expect: dict[int, set] = {}
        parts = {w: self.load_parts(sids) for w, sids in plan.items() if sids}
        last_progress = {w: clock.monotonic() for w in parts}

        def step() -> bool | None:
            if not parts:
                return None
            progressed = False
            for w in list(parts):
                done = self.mail.sent(w)
                if done is None:
                    parts.pop(w)
                    continue
                if not done:
                    if clock.monotonic() - last_progress[w] > self.settings.reconfigure_timeout:
                        self.fail(
                            w,
                            f"no progress receiving its shards within reconfigure_timeout="
                            f"{self.settings.reconfigure_timeout:g} s (hung)",
                        )
                        parts.pop(w)
                    continue
                sid, a, b, last = parts[w].pop(0)
                if not self.mail.post(w, Load(sid, self.store.read_packed(sid, a, b), last)):
                    parts.pop(w)
                    continue
                if last:
                    expect.setdefault(w, set()).add((Loaded, sid))
                last_progress[w] = clock.monotonic()
                progressed = True
                if not parts[w]:
                    parts.pop(w)
            self.check_failures()
            for w in list(parts):
                if not self.membership.is_live(w) or w not in self.mail.links:
                    parts.pop(w)
            return progressed

        self.mail.wait(step)
        return expect

    # -- rounds --------------------------------------------------------------------
    @probes.spanned("round")
    def run_round(
        self,
        kind: str,
        body: Any,
        extras: dict[int, Any] | None = None,
        preloaded: dict[int, Any] | None = None,
        record=None,
        fold=None,
        body_pickled: bytes | None = None,
        scores: dict[int, Any] | None = None,
    ) -> dict[int, Any]:
        """Compute every shard's result for one call; exact whatever fails meanwhile
        (``runtime.round.Round`` says how)."""
        return Round(self, kind, body, extras, preloaded, record, fold, body_pickled, scores).run()

    def encoded_here(self) -> dict[int, Any]:
        """The driver's own shards, encoded as a worker encodes its resident ones (once)."""
        if self.here_chunks is None:
            retain_freed_memory()  # as on a worker: E-step temporaries reuse heap pages (core/malloc.py)
            encoder = pickle.loads(self.encoder_pickled)  # nosec B301 - pickled by this process
            self.here_chunks = {
                s: estep.encode_shard(
                    encoder, rows_from_packed(self.store.read_packed(s)), self.sub_chunks
                )
                for s in self.places.here
            }
        return self.here_chunks

    def _driver_share(self, holders: int) -> list[int]:
        """The driver's own shards (``placement.driver_share``), and an event saying which and
        why: the setting, the share's stored bytes and the cap on them."""
        on, cap = self.settings.driver_computes, self.settings.driver_share_max_bytes
        sizes = {
            s: self.store.shard_bytes(s) for s in driver_share(self.num_shards, holders, on)
        }  # uncapped
        share = driver_share(self.num_shards, holders, on, sizes.__getitem__, cap)
        self.events.emit(
            "driver_shards",
            shards=share,
            share=len(sizes),
            setting=on,
            num_shards=self.num_shards,
            share_bytes=sum(sizes.values()),
            max_bytes=cap,
        )
        return share

    def no_workers_error(self) -> NoWorkersLeft:
        fails = ", ".join(
            f"rank {w}: {n} failure(s)" for w, n in self.membership.failures().items()
        )
        return NoWorkersLeft(
            f"every worker rank is dead or blacklisted ({fails}); max_retries={self.membership.max_retries}"
            f"{'' if self.arrivals.can_spawn else ', respawn unavailable'}. The fit cannot continue."
        )

    def release(self, shards) -> None:
        """The kept copies of ``shards`` are not needed any more: their holders drop them."""
        for holder, sids in self.places.release(shards).items():
            self.mail.post(holder, Release(tuple(sids)))

    # -- ending ------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the original workers. Respawned ones stay parked until :meth:`finish`:
        their exit needs a disconnect, and under Open MPI it can end the whole job once
        some rank exited with a nonzero status, so it must come after results are saved."""
        if self.closed:
            return
        self.closed = True
        live = self.live()
        self._stop([w for w in live if self.mail.links[w].inter is None])
        self.events.emit(
            "closed",
            live=live,
            blacklisted=self.membership.blacklisted(),
            failures=self.membership.failures(),
        )

    def finish(self) -> None:
        """At process exit: stop and disconnect respawned workers (a Spawn still under way is
        waited for, within its deadline and ``spawner.EXIT_WAIT``, so that its process is
        stopped too), stop the monitor."""
        t0 = clock.monotonic()
        self.arrivals.spawner.settle()
        self.arrivals.advance_spawns(clock.monotonic())
        if (
            self.arrivals.spawner.running
        ):  # its process died as it started: under Open MPI that Spawn never returns
            self.events.emit(
                "spawn_abandoned",
                workers=sorted(self.arrivals.spawner.running),
                waited=round(clock.monotonic() - t0, 3),
                cause="a replacement's Spawn had not finished at the fit's end; the results are saved",
            )
        spawned = {
            w: self.mail.links[w].inter
            for w in self._reachable()
            if self.mail.links[w].inter is not None
        }
        self._stop(list(spawned))
        self.monitor.stop()
        for w, inter in spawned.items():  # a worker failed meanwhile is disconnected all the same
            try:
                run_with_deadline(inter.Disconnect, DISCONNECT_TIMEOUT, "disconnect")
            except (TimeoutError, MPI.Exception) as exc:
                logs.get("driver").warning(f"disconnecting respawned rank {w} failed: {exc}")

    def _stop(self, workers: list[int], msg=None, wait: float = STOP_SEND_WAIT) -> None:
        """Send ``msg`` (a ``Stop`` unless given) to ``workers`` and wait (bounded) until the
        sends have completed."""
        msg = Stop() if msg is None else msg
        for w in workers:
            self.mail.post(w, msg)
        deadline = clock.monotonic() + wait
        pending = list(workers)

        def step() -> bool | None:
            pending[:] = [
                w for w in pending if self.mail.sent(w) is False
            ]  # None: it failed meanwhile
            return None if not pending or clock.monotonic() >= deadline else False

        self.mail.wait(step)

    def abort_workers(self, code: int) -> None:
        """Best effort, before a failing driver exits: tell every worker to end now."""
        self._stop(self._reachable(), Abort(int(code)), wait=ABORT_SEND_WAIT)
