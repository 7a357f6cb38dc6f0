"""Between rounds: shrink or keep the communicator, respawn, adopt or blacklist, migrate.

A collaborator of the driver (``driver.Driver.reconfiguring``): it feeds the workers failed since the
last reconfiguration to ``reconfig.plan`` and carries out the actions it returns, in
order, while every worker is idle: ``ShrinkComm`` (ULFM or emulated; ``shrink``),
``KeepComm``, ``Adopt`` and ``Respawn`` (through ``arrivals.Arrivals``), ``Blacklist``;
then the placement (``policy/places``) moves blacklisted places' shards for good. It uses the driver's
mailroom, monitor, membership and placement, its ``live``, ``collect``, ``load`` and
``release``, and its ``arrivals`` for new processes.
"""

from __future__ import annotations

import functools
import time

from mpi4py import MPI

from mixle_mpi.core.deadlines import run_with_deadline
from mixle_mpi.core.errors import RERUN_ADVICE, ReconfigurationTimeout
from mixle_mpi.core.protocol import TAG_REPLY, Release, Shrink, ShrinkGo, ShrinkReady, Shrunk
from mixle_mpi.policy import reconfig_plan as reconfig
from mixle_mpi.policy.reconfig_plan import (
    EMULATED,
    Adopt,
    Blacklist,
    KeepComm,
    Respawn,
    ShrinkComm,
    renumber,
    shrink_method,
)
from mixle_mpi.runtime.shrink import shrink
from mixle_mpi.runtime.transport import Link

ULFM_CHECK_WAIT, ULFM_CHECK_POLL = 1.0, 0.01  # seconds ULFM gets to report excluded ranks failed


class Reconfiguring:
    """The driver's collaborator that reshapes the job after failures, between rounds. It
    owns the shrink epoch; the communicator, the places and the membership it reshapes are
    the driver's (``self.d``), and new processes come through the driver's ``arrivals``."""

    def __init__(self, driver) -> None:
        self.d = driver
        self.epoch = 0

    def reconfigure(self) -> list[int]:
        """Between rounds: shrink, respawn or blacklist, and re-place orphaned shards.
        Returns the workers blacklisted now. Loops until no failure is pending."""
        blacklisted: list[int] = []
        while self.d.pending or self.d.arrivals.spawns_failed():
            failed = sorted(self.d.pending)
            self.d.pending.clear()
            spares = self.d.places.idle(self.d.live())
            actions = (
                reconfig.plan(
                    failed,
                    self.d.group_ranks,
                    self.d.membership,
                    self.d.arrivals.can_spawn,
                    self.d.settings.respawn,
                    self.d.places.snapshot(),
                    spares,
                    self.d.shrink_method,
                )
                if failed
                else []
            )
            actions += [
                reconfig.respawn_failed(self.d.membership, w, self.d.settings.respawn)
                for w in self.d.arrivals.take_spawn_failures()
            ]
            while actions:
                action = actions.pop(0)
                if isinstance(action, ShrinkComm):
                    self._shrink()
                elif isinstance(action, KeepComm):
                    self._keep(action.dropped)
                elif isinstance(action, Adopt):
                    if not self.d.arrivals.adopt(action.worker, action.spare):
                        self.d.pending.add(action.worker)  # the spare died meanwhile: decide again
                elif isinstance(action, Respawn):
                    if not self.d.arrivals.respawn(action.worker):
                        actions.append(
                            reconfig.respawn_failed(
                                self.d.membership, action.worker, self.d.settings.respawn
                            )
                        )
                elif isinstance(action, Blacklist):
                    w = action.worker
                    self.d.membership.blacklist(w)
                    blacklisted.append(w)
                    host, pid = self.d.info.get(w, (None, None))
                    self.d.events.emit(
                        "blacklisted",
                        worker=w,
                        host=host,
                        pid=pid,
                        failures=self.d.membership.records[w].failures,
                        cause=action.cause,
                    )
            self._migrate()
        return blacklisted

    def _migrate(self) -> None:
        """Shards of blacklisted places move for good onto the least-loaded live workers."""
        blacklisted = self.d.membership.blacklisted()
        if not self.d.places.owns_any(blacklisted):
            return
        live = self.d.live()
        if not live:
            if self.d.pending:
                return  # the next loop of reconfigure() respawns someone first
            self.d.arrivals.await_a_worker()
            live = self.d.live()
        plan, load = self.d.places.migrate(blacklisted, live)
        for w, sids in plan.items():
            self.d.events.emit("migrated", worker=w, shards=sids)
        self.d.release([s for sids in plan.values() for s in sids])  # copies kept elsewhere
        self.d.load(load)

    def rebalance(self) -> bool:
        """Between rounds, with no failure, join or kept copy under way: move shards from a
        worker that stays slow to faster ones, or back once it recovers
        (policy/rebalance_plan.py). The new owner loads them, then the old one drops them.
        Whether shards moved."""
        d = self.d
        if d.pending or d.places.any_kept() or d.arrivals.joining_places():
            return False
        holders = d.places.holding(d.live())
        paces = {w: d.paces.of("estep", w) for w in holders}
        move = d.rebalancer.plan(holders, paces, d.contention)
        if not move:
            return False
        load: dict[int, list[int]] = {}
        drop: dict[int, list[int]] = {}
        for s, (src, dst) in sorted(move.items()):
            d.places.move(s, src, dst)
            load.setdefault(dst, []).append(s)
            drop.setdefault(src, []).append(s)
        d.events.emit(
            "rebalanced",
            moves={s: list(m) for s, m in sorted(move.items())},
            paces={w: round(p, 6) for w, p in paces.items() if p is not None},
            shards={w: len(d.places.of(w)) for w in holders},
        )
        d.load(load)
        for src, sids in sorted(drop.items()):
            d.mail.post(src, Release(tuple(sids)))
        return True

    def _shrink(self) -> None:
        """Agree on the surviving original ranks, then shrink the group communicator."""
        while True:
            self.epoch += 1
            epoch = self.epoch
            survivors = sorted(
                w
                for w in self.d.group_ranks
                if self.d.membership.is_live(w) and w in self.d.mail.links
            )
            ranks = [0] + [self.d.group_ranks[w] for w in survivors]
            reported = (
                self.d.shrink_method == EMULATED
                or not self.d.started
                or self._ulfm_knows_failed(survivors)
            )
            method, fallback = shrink_method(self.d.shrink_method, self.d.started, reported)
            if fallback:
                self.d.events.emit(
                    "shrink_fallback",
                    ranks=sorted(set(self.d.group_ranks) - set(survivors)),
                    cause=fallback,
                )
            for w in survivors:
                self.d.mail.post(w, Shrink(epoch, ranks, method))
            ready = self.d.collect({w: {(ShrinkReady, epoch)} for w in survivors}, "shrink_ready")
            if sorted(ready) != survivors:
                continue  # someone died before the collective: agree again without them
            for w in survivors:
                self.d.mail.post(w, ShrinkGo(epoch))
                self.d.mail.sent(w)
            # the driver's own chaos: the survivors shrink without it
            self.d.faults.check("shrink", epoch)
            if any(w not in self.d.mail.links for w in survivors):
                continue  # one died before the collective: agree again without it
            t0 = time.perf_counter()
            try:
                comm = run_with_deadline(
                    functools.partial(shrink, self.d.group_comm, ranks, method, epoch),
                    self.d.settings.reconfigure_timeout,
                    "shrink",
                )
                hb = run_with_deadline(
                    comm.Dup, self.d.settings.reconfigure_timeout, "heartbeat dup"
                )
            except TimeoutError as exc:
                raise ReconfigurationTimeout(
                    f"shrinking to ranks {ranks} ({method}) failed: {exc}; a rank probably died inside "
                    f"the collective on an MPI without ULFM. {RERUN_ADVICE}"
                ) from None
            if comm.Get_size() != len(ranks):
                raise ReconfigurationTimeout(
                    f"shrink returned {comm.Get_size()} ranks, expected {len(ranks)}"
                )
            seconds = time.perf_counter() - t0
            self.d.group_comm = comm
            self.d.group_ranks = renumber(self.d.group_ranks, survivors)
            for w in survivors:
                self.d.mail.connect(w, Link(comm, hb, self.d.group_ranks[w]))
                self.d.monitor.watch(w, self.d.mail.links[w])
            self.d.collect({w: {(Shrunk, epoch)} for w in survivors}, "shrunk")
            self.d.events.emit(
                "shrink", method=method, epoch=epoch, survivors=survivors, seconds=round(seconds, 6)
            )
            return

    def _keep(self, dropped: tuple) -> None:
        """KEEP: no collective, no handshake. The dead original ranks leave ``group_ranks``; their
        links and heartbeats went when they failed (``fail``), so nothing addresses them
        again. ``group_comm`` stays, and every survivor keeps its rank."""
        for w in dropped:
            self.d.group_ranks.pop(w, None)
            self.d.mail.forget(w)
            self.d.monitor.forget(w)
        survivors = sorted(
            w for w in self.d.group_ranks if self.d.membership.is_live(w) and w in self.d.mail.links
        )
        self.d.events.emit(
            "kept",
            method="keep",
            dropped=list(dropped),
            survivors=survivors,
            ranks={w: self.d.group_ranks[w] for w in survivors},
        )

    def _ulfm_knows_failed(self, survivors: list[int], wait: float = ULFM_CHECK_WAIT) -> bool:
        """ULFM's Shrink waits forever for a member the library does not know to be dead
        (one that was fenced but is alive elsewhere, or that exited without a signal), so
        it is used only once the library itself reports every excluded rank failed."""
        excluded = [r for w, r in self.d.group_ranks.items() if w not in survivors]
        deadline = time.monotonic() + wait
        pending = set(excluded)
        while pending:
            for rank in sorted(pending):
                try:
                    self.d.group_comm.Iprobe(source=rank, tag=TAG_REPLY)
                except MPI.Exception as exc:
                    if exc.Get_error_class() == MPI.ERR_PROC_FAILED:
                        pending.discard(rank)
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(ULFM_CHECK_POLL)
        return not pending
