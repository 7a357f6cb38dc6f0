"""The driver's heartbeat thread: hears workers, beats back, and names the silent ones.

It runs beside the driver's main thread (MPI_THREAD_MULTIPLE) on the dedicated heartbeat
communicators, so detection keeps working while the driver folds, runs the M-step or sits
in user code. It only reports suspects; the main thread decides what happens to them.
Above ``max_direct`` workers on one communicator it hears most of them through relays
(policy/fanin_plan.py): it tells each worker its role, and exchanges beats with relays only.
"""

from __future__ import annotations

import threading
import time

from mpi4py import MPI

from mixle_mpi.core import probes
from mixle_mpi.core.protocol import TAG_HB, Beat, Quiet
from mixle_mpi.policy.fanin_plan import DEFAULT_MAX_DIRECT, DIRECT, Role, named_silent, plan, roles
from mixle_mpi.policy.heartbeat import HeartbeatTracker, StallTracker, answer_due
from mixle_mpi.runtime.transport import MAX_PENDING_BEATS, Link, PeerFailed


class Monitor:
    def __init__(
        self,
        period: float,
        timeout: float,
        stall_timeout: float = float("inf"),
        max_direct: int = DEFAULT_MAX_DIRECT,
    ) -> None:
        self.period = period
        self.max_direct = max_direct
        self._roles: dict[int, Role] = {}  # each watched worker's role, as last planned
        self._via: dict[int, int] = {}  # relayed worker -> its relay
        self._outbox: dict[int, Role] = {}  # roles changed, not sent yet
        self._notes: dict[
            int, list
        ] = {}  # other messages for a worker's heartbeat thread (a Fence)
        self._replan = False
        self.passed_at = time.monotonic()  # when the last pass completed (runtime/watchdog.py)
        self.watchdog = None  # started and stopped with this thread, if set
        self.tracker = HeartbeatTracker(timeout)
        self.stalls = StallTracker(stall_timeout)
        self.lock = threading.Lock()
        self._links: dict[int, Link] = {}
        self._suspects: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="mixle-mpi-monitor")

    def start(self) -> None:
        self.passed_at = time.monotonic()
        self._thread.start()
        if self.watchdog is not None:
            self.watchdog.start()

    def stop(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5 * self.period + 1.0)

    def watch(self, worker: int, link: Link) -> None:
        """Follow ``worker`` on ``link`` with a fresh grace period."""
        with self.lock:
            self._links[worker] = link
            self._suspects.pop(worker, None)
            self.tracker.watch([worker])
            self.stalls.forget(worker)
            self._replan = True

    def forget(self, worker: int) -> None:
        with self.lock:
            self._links.pop(worker, None)
            self._notes.pop(worker, None)
            self.tracker.forget(worker)
            self.stalls.forget(worker)
            self._replan = True

    def grace(self, worker: int, seconds: float) -> None:
        """Allow ``worker`` up to ``seconds`` of silence (0 restores the normal timeout): a
        shard load unpickles and encodes in long calls that hold the GIL, so the worker's
        heartbeat thread may not run. ULFM still reports a real death at once."""
        with self.lock:
            self.tracker.set_grace(worker, seconds)

    def extend(self, worker: int) -> None:
        """Give a suspected ``worker`` one more timeout from now (policy/suspicion.py)."""
        with self.lock:
            if worker in self._links:
                self.tracker.watch([worker])

    def heard_since(self, worker: int, since: float) -> bool:
        """``worker`` was heard after ``since`` (monotonic seconds)."""
        with self.lock:
            return self.tracker.heard_since(worker, since)

    def send(self, worker: int, msg) -> None:
        """Have ``worker``'s heartbeat thread get ``msg`` at the next pass (it may be mid-task)."""
        with self.lock:
            self._notes.setdefault(worker, []).append(msg)

    def quiet(self, seconds: float) -> None:
        """Tell every watched worker, from the caller's thread and at once, that this thread
        may not beat for up to ``seconds``: the caller is about to block the MPI library (a
        Spawn under MPICH holds its lock). A worker told so waits that much longer before
        taking the driver for gone. Bounded: a send that does not complete within a
        heartbeat period is left (its worker is dead or will be found so)."""
        with self.lock:
            links = list(self._links.values())
        sends = []
        for link in links:
            try:
                sends.append(link.hb.isend(Quiet(float(seconds)), dest=link.peer, tag=TAG_HB))
            except MPI.Exception:
                continue  # ULFM: that worker is dead; the monitor will say so
        end = time.monotonic() + self.period
        while sends and time.monotonic() < end:
            try:
                sends = [r for r in sends if not r.Test()]
            except MPI.Exception:
                break
            if sends:
                time.sleep(0.001)

    def relays(self) -> dict[int, int]:
        """Each worker heard through a relay, with its relay, as last planned."""
        with self.lock:
            return dict(self._via)

    def suspect(self, worker: int, cause: str) -> None:
        with self.lock:
            self._suspects.setdefault(worker, (cause, time.time()))

    def take_suspects(self) -> dict[int, tuple[str, float]]:
        """Workers reported failed since the last call, with (cause, wall time of detection)."""
        with self.lock:
            out, self._suspects = self._suspects, {}
            return {w: v for w, v in out.items() if w in self._links}

    @staticmethod
    def _exchange(link: Link, role: Role | None, relayed: bool, notes: list) -> list:
        """MPI only, outside the lock: the beats waiting from ``link``'s worker, and one back
        when it was heard (``heartbeat.answer_due``: a dead worker is sent nothing more), or
        its new ``role`` if it has one. A relayed worker only gets its new role; ``notes`` go
        to either."""
        beats = [] if relayed else link.drain(TAG_HB, comm=link.hb)
        link.hb_sends = [r for r in link.hb_sends if not r.Test()]
        for note in notes:
            link.hb_sends.append(link.hb.isend(note, dest=link.peer, tag=TAG_HB))
        if role is not None:  # never dropped: the worker would beat to the wrong place
            link.hb_sends.append(link.hb.isend(role, dest=link.peer, tag=TAG_HB))
        elif (
            not relayed and answer_due(len(beats), False) and len(link.hb_sends) < MAX_PENDING_BEATS
        ):
            link.hb_sends.append(link.hb.isend(None, dest=link.peer, tag=TAG_HB))
        return beats

    def _plan(self) -> None:
        """Under the lock: each worker's role after a change of who is watched, and the
        roles to send. A worker that now beats somewhere else starts a fresh deadline."""
        self._replan = False
        shared: dict[int, list[int]] = {}
        for w, link in self._links.items():
            if isinstance(link.hb, MPI.Intracomm):  # a relay reaches its members on it
                shared.setdefault(id(link.hb), []).append(w)
        new = {w: DIRECT for w in self._links}
        via: dict[int, int] = {}
        for ws in shared.values():
            relay_of = plan(ws, self.max_direct)
            new.update(roles(relay_of, {w: self._links[w].peer for w in ws}))
            via.update((w, r) for w, r in relay_of.items() if r is not None)
        for w, role in new.items():
            old = self._roles.get(w, DIRECT)
            if role != old:
                self._outbox[w] = role
            if role.relay != old.relay:
                self.tracker.set_hop(w, self.period if role.relay is not None else 0.0)
                self.tracker.watch([w])
        self._roles, self._via = new, via

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            # MPI calls happen outside the lock: under MPICH's global lock one of them can wait
            # for another thread's blocking call, and the main thread must never wait on that.
            with self.lock:
                if self._replan:
                    self._plan()
                targets = [
                    (w, link, self._outbox.pop(w, None), w in self._via, self._notes.pop(w, []))
                    for w, link in self._links.items()
                    if w not in self._suspects
                    and (w not in self._via or w in self._outbox or w in self._notes)
                ]
            results: dict[int, tuple[Link, object]] = {}
            for worker, link, role, relayed, notes in targets:
                with self.lock:  # forgotten meanwhile (failed): never address it again
                    if self._links.get(worker) is not link:
                        continue
                try:
                    results[worker] = (link, self._exchange(link, role, relayed, notes))
                except (PeerFailed, MPI.Exception) as exc:
                    results[worker] = (link, exc)
            with self.lock:
                self._record(results)
                now = time.monotonic()
                if now - last > self.tracker.timeout / 2:
                    # This thread could not listen (the process was descheduled, or MPICH's
                    # global lock was held by a blocking Spawn): blame no worker for it.
                    self.tracker.watch(self.tracker.watched)
                last = now
                self._name_suspects()
            self.passed_at = time.monotonic()
            self._stop.wait(self.period / 2)

    @probes.spanned("heartbeats_heard")
    def _record(self, results: dict) -> None:
        """Under the lock: what the exchange found, for links still current."""
        for worker, (link, got) in results.items():
            if self._links.get(worker) is not link or worker in self._suspects:
                continue  # re-watched on a new link, or forgotten, meanwhile
            if isinstance(got, Exception):
                self._suspects[worker] = (f"ulfm: {got}", time.time())
                continue
            for beat in got:
                self.tracker.heard(worker)
                if isinstance(beat, Beat):
                    self.stalls.observe(worker, beat.progress, beat.busy)
                    self._relayed(worker, beat.members)

    def _relayed(self, relay: int, lines) -> None:
        """Under the lock: what ``relay`` says of its members (only those it relays now)."""
        for line in lines:
            w = line.worker
            if self._via.get(w) != relay or w in self._suspects:
                continue
            if line.cause:
                self._suspects[w] = (
                    f"ulfm: {line.cause} (seen by its heartbeat relay, worker {relay})",
                    time.time(),
                )
                continue
            self.tracker.heard_ago(w, line.age)
            self.stalls.observe(w, line.progress, line.busy)

    def _name_suspects(self) -> None:
        """Under the lock: the silent ones and the stuck ones."""
        for worker in named_silent(self.tracker.overdue(), self._via, self._suspects):
            if worker not in self._suspects:
                silent = self.tracker.silence(worker)
                via = (
                    f", heard through its relay, worker {self._via[worker]}"
                    if worker in self._via
                    else ""
                )
                self._suspects[worker] = (
                    f"heartbeat: silent for {silent:.2f} s (limit {self.tracker.limit(worker):g} s{via})",
                    time.time(),
                )
        for worker, stuck in self.stalls.stalled().items():
            if worker not in self._suspects:
                self._suspects[worker] = (
                    f"stalled: beats, but its main thread made no progress on its task for {stuck:.1f} s "
                    f"(limit stall_timeout={self.stalls.timeout:g} s)",
                    time.time(),
                )
