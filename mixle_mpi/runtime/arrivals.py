"""A new process takes a failed place: a replacement, or an idle spare adopted at once.

A collaborator of the driver (``driver.Driver.arrivals``): it carries out ``reconfig``'s Respawn
and Adopt decisions. A replacement's Spawn runs beside the fit where it may
(``spawner.Spawner``); the replacement then joins in the background (``policy/join_plan.py``)
while the survivors carry its shards, and takes them back at a round boundary. Set apart
from the rounds and the reconfiguration because its steps interleave with both: a round
polls ``advance_joins`` while it waits for results. It uses the driver's mailroom, monitor,
membership, placement (``places``) and its ``fail``, ``live``, ``collect``, ``load``,
``load_parts``, ``release``, ``setup_message`` and ``note_ready``.
"""

from __future__ import annotations

import os
import time

from mixle_mpi.core import clock, procs
from mixle_mpi.core.protocol import Load, Loaded, Ready
from mixle_mpi.core.settings import Settings
from mixle_mpi.policy.join_plan import Join
from mixle_mpi.policy.placement import replacement_here, respawn_host
from mixle_mpi.runtime.spawner import Spawner, SpawnFailed, SpawnUnavailable
from mixle_mpi.runtime.transport import Link


class Arrivals:
    """The driver's collaborator that brings new processes into failed places. It owns the
    places' new processes (the Spawner, the joins on their way, the failed Spawns); the
    places themselves, the mailroom and the monitor are the driver's (``self.d``)."""

    def __init__(self, driver, settings: Settings, spawner: Spawner) -> None:
        self.d = driver
        self.spawner = spawner
        self.can_spawn = settings.respawn and spawner.command is not None
        self.respawn_hosts: dict[
            int, str | None
        ] = {}  # place -> the host its last replacement was asked on
        self.joining: dict[int, Join] = {}  # replacements on their way in (policy/join_plan.py)
        self.spawn_failed: list[int] = []  # places whose background Spawn failed
        self.odd_hosts: set[str] = set()  # hosts whose process computed other bits

    def is_joining(self, worker: int) -> bool:
        """A replacement of ``worker``'s place is on its way in (it computes no round yet)."""
        return worker in self.joining

    def joining_places(self) -> list[int]:
        return sorted(self.joining)

    def forget(self, worker: int) -> None:
        """``worker``'s process failed: a join it was making is over."""
        self.joining.pop(worker, None)

    def spawns_failed(self) -> bool:
        return bool(self.spawn_failed)

    def take_spawn_failures(self) -> list[int]:
        """The places whose background Spawn failed since the last call (to blacklist)."""
        failed, self.spawn_failed = self.spawn_failed, []
        return failed

    def computed_other_bits_on(self, host: str) -> None:
        """A process on ``host`` was refused for its numerics: replacements go elsewhere
        while another host is known (``placement.respawn_host``)."""
        self.odd_hosts.add(host)

    def respawn(self, worker: int) -> bool:
        """Start a replacement process for ``worker``; it gets the same shards back. It joins
        in the background (policy/join_plan.py) while the survivors carry its shards; the Spawn
        itself runs beside the fit where it may (``spawner.Spawner``). With ``respawn_wait``
        the fit waits until the replacement is set up and loaded."""
        t0 = time.perf_counter()
        failed_host = self.d.info.get(worker, (None, None))[0]
        live_hosts = [self.d.info[w][0] for w in self.d.live() if w != worker and w in self.d.info]
        host = respawn_host(failed_host, live_hosts, self.d.host, self.odd_hosts)
        here = replacement_here(
            host, [*live_hosts, *([failed_host] if failed_host else [])], self.d.host, os.environ
        )
        if not self.spawner.background and not self.spawner.unavailable:
            self.d.monitor.quiet(
                self.spawner.timeout
            )  # a Spawn in this thread may hold MPI, and the beats (MPICH)
        try:
            link = self.spawner.start(
                worker, host, (self.d.encoder_pickled, self.d.body_pickled), here
            )
        except SpawnUnavailable as exc:  # the shards migrate
            self._spawn_unavailable(worker, str(exc))
            return False
        self.respawn_hosts[worker] = host
        if link is not None and self.d.settings.respawn_wait:
            pid = self._replacement_pid(worker)
            self.d.group_ranks.pop(worker, None)
            self._bring_up(worker, link, "respawned", t0, watch=pid)
            return True
        self._start_join(worker, t0)
        if link is not None:
            self._begin_join(worker, link)
        return True

    def _start_join(self, worker: int, t0: float) -> None:
        """A replacement for ``worker`` is on its way (spawned, or being spawned): it joins in
        the background, as incarnation + 1 of the place."""
        self.d.group_ranks.pop(worker, None)
        incarnation = self.d.membership.revive(worker)
        self.joining[worker] = Join(worker, clock.monotonic())
        self.d.events.emit(
            "respawn_started",
            worker=worker,
            incarnation=incarnation,
            shards=self.d.places.of(worker),
            seconds=round(time.perf_counter() - t0, 6),
            **({"on_host": self.respawn_hosts[worker]} if self.respawn_hosts.get(worker) else {}),
        )
        self.d.faults.check("respawn")  # the driver's own chaos, while a replacement is on its way

    def _spawn_unavailable(self, worker: int, cause: str) -> None:
        self.can_spawn = False
        self.d.events.emit(
            "spawn_unavailable", worker=worker, cause=cause, action="shards migrate to survivors"
        )

    def _begin_join(self, worker: int, link: Link) -> None:
        """The replacement's process is connected: set it up (it imports before it beats)."""
        self.d.mail.connect(worker, link)
        self.joining[worker].since = clock.monotonic()
        self.joining[worker].pid = self._replacement_pid(worker)
        self.d.monitor.grace(worker, self.d.settings.reconfigure_timeout)
        if self.d.mail.post(worker, self.d.setup_message(worker)):
            self.d.monitor.watch(worker, link)

    def _replacement_pid(self, worker: int) -> int | None:
        """The pid of ``worker``'s just-connected replacement, if on this host (its birth
        record): the place's process from now on, to fence and to watch while it joins."""
        ident = self.spawner.born.pop(worker, None)
        if ident is None:
            return None
        self.d.info[worker] = (self.d.host, ident[0])
        self.d.started_at[worker] = ident[1]  # its identity: only that process is ever fenced
        self.d.spaces[worker] = (
            self.d.space
        )  # its record is of this host and pid space (birth.identity_here)
        return ident[0]

    def advance_spawns(self, now: float) -> bool:
        """Background Spawns: connect the ones that finished. One whose process died is one
        more failure of its place (it may get another replacement); one that failed
        otherwise or overran reconfigure_timeout leaves its place to be blacklisted (its
        shards migrate)."""
        progressed = False
        for w, got in self.spawner.finished(now):
            if not isinstance(got, SpawnFailed):  # its link
                self._begin_join(w, got)
                progressed = True
            elif got.died:
                self.d.info[w] = (
                    self.d.host,
                    got.pid,
                )  # the dead replacement (watched on this host)
                self.d.fail(w, got.why)
            else:
                self._spawn_failed(w, got.why)
        return progressed

    def _spawn_failed(self, worker: int, cause: str) -> None:
        self.joining.pop(worker, None)
        self._spawn_unavailable(worker, cause)
        self.spawn_failed.append(worker)  # blacklisted by the next reconfigure()

    def advance_joins(self) -> bool:
        """One poll of each replacement on its way in: take its Ready and Loaded replies and
        send its next shard block once the last one was delivered (never blocks; a hung
        one is failed after reconfigure_timeout without a step forward). True if any moved."""
        now = clock.monotonic()
        progressed = self.advance_spawns(now)
        for w in list(self.joining):
            if w in self.spawner.running:
                continue
            join = self.joining[w]
            if join.pid is not None and procs.gone(
                join.pid
            ):  # no heartbeat verdict yet: it has a grace
                self.d.fail(w, f"its process (pid {join.pid}) ended while it joined")
                continue
            for msg in self.d.mail.drain(w):
                if isinstance(msg, Ready) and not join.ready:
                    if not self.d.note_ready(w, msg):
                        break  # other numerics: it failed, and gets no shard
                    join.got_ready(self.d.load_parts(self.d.places.of(w)), now)
                    self.d.events.emit(
                        "respawn_ready",
                        worker=w,
                        host=msg.host,
                        pid=msg.pid,
                        incarnation=self.d.membership.records[w].incarnation,
                    )
                    progressed = True
                elif isinstance(msg, Loaded):
                    join.got_loaded(msg.shard, now)
                    progressed = True
            if w not in self.joining:
                continue  # it failed meanwhile
            if join.parts and self.d.mail.sent(w):
                sid, a, b, last = join.next_part(now)
                progressed = (
                    self.d.mail.post(w, Load(sid, self.d.store.read_packed(sid, a, b), last))
                    or progressed
                )
            elif w in self.joining and join.stalled(now, self.d.settings.reconfigure_timeout):
                self.d.fail(
                    w,
                    f"no progress joining within reconfigure_timeout={self.d.settings.reconfigure_timeout:g} s (hung)",
                )
        return progressed

    def finish_joins(self) -> None:
        """At a round boundary: every replacement that holds its shards takes them back, and
        the survivors that carried them drop their copies."""
        for w in sorted(self.joining):
            join = self.joining[w]
            if not join.joined():
                continue
            del self.joining[w]
            self.d.monitor.grace(w, 0.0)
            shards = self.d.places.of(w)
            self.d.release(shards)
            host, pid = self.d.info[w]
            self.d.events.emit(
                "respawned",
                worker=w,
                host=host,
                pid=pid,
                incarnation=self.d.membership.records[w].incarnation,
                shards=shards,
                seconds=round(clock.monotonic() - join.started, 6),
                background=True,
            )

    def await_a_worker(self) -> None:
        """No worker computes, but replacements are joining: wait for one (bounded by its own
        join deadline), since nobody else can take the orphans. Fails if none comes."""

        def step() -> bool | None:
            self.d.check_failures()
            self.finish_joins()
            return None if self.d.live() or not self.joining else self.advance_joins()

        if not self.d.live() and self.joining:
            self.d.mail.wait(step)
        if not self.d.live():
            raise self.d.no_workers_error()

    def adopt(self, worker: int, spare: int) -> bool:
        """The idle spare's process takes ``worker``'s place: it is told its new identity and
        loads the place's shards (no Spawn: it was set up and beating already). False if the
        spare died meanwhile (then it is a failure of its own, and ``worker`` waits)."""
        t0 = time.perf_counter()
        link = self.d.mail.links.get(spare)
        if link is None or not self.d.membership.is_live(spare):
            return False
        self.d.monitor.forget(spare)
        self.d.mail.rename(spare, worker)
        if spare in self.d.group_ranks:
            self.d.group_ranks[worker] = self.d.group_ranks.pop(spare)
        warm = self.d.places.adopt(spare, worker)
        self.d.membership.retire(spare)
        if spare in self.d.info:
            self.d.info[worker] = self.d.info.pop(
                spare
            )  # fencing must aim at the spare's process now
        else:
            self.d.info.pop(worker, None)
        place = set(self.d.places.of(worker))  # the spare's copies of it: its own shards now
        self._bring_up(
            worker, link, "spare_adopted", t0, held=warm, spare=spare, warm=sorted(warm & place)
        )
        return True

    def _bring_up(
        self,
        worker: int,
        link: Link,
        event: str,
        t0: float,
        held=frozenset(),
        watch: int | None = None,
        **fields,
    ) -> None:
        """The process now on ``link`` takes ``worker``'s place (a replacement or a spare):
        set it up, wait for it to be ready, send it the place's shards less those it
        ``held`` already, then log ``event`` with ``fields``. A failure on the way is one of
        its own, handled like any other (the place then waits for the next recovery).
        ``watch``: the replacement's pid on this host (its birth record), whose end is seen at
        once while it has no heartbeat verdict yet (MPICH has no ULFM to report it)."""
        self.d.mail.connect(worker, link)
        incarnation = self.d.membership.revive(worker)
        self.d.monitor.grace(
            worker, self.d.settings.reconfigure_timeout
        )  # a replacement imports before it beats
        if self.d.mail.post(worker, self.d.setup_message(worker)):
            self.d.monitor.watch(worker, link)
        ready = self.d.collect(
            {worker: {(Ready, worker)}},
            "ready",
            watch={worker: (watch, self.d.started_at[worker])} if watch is not None else None,
        )
        if worker in ready and self.d.note_ready(worker, ready[worker][0]):
            self.d.load({worker: [s for s in self.d.places.of(worker) if s not in held]})
        self.d.monitor.grace(worker, 0.0)
        if self.d.membership.is_live(worker):
            self.d.release(self.d.places.of(worker))  # survivors' copies from the recovery
            host, pid = self.d.info[worker]
            self.d.events.emit(
                event,
                worker=worker,
                host=host,
                pid=pid,
                incarnation=incarnation,
                shards=self.d.places.of(worker),
                **fields,
                seconds=round(time.perf_counter() - t0, 6),
            )
