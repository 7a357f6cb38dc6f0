"""One call's round on the driver: send the shards out, take the replies, recover what fails.

The decisions are ``policy.round_plan.RoundState``'s (who computes what, which reply counts, what
a failure asks for); this class only carries them out with the driver's collaborators (its
mailroom, membership, store and fault hook), and computes the driver's own share meanwhile.
A Round lives for one call: ``Driver.run_round`` makes one and runs it.
"""

from __future__ import annotations

import itertools
import os
import pickle
import time
import traceback
from typing import Any, Callable

from mixle_mpi.core import clock, estep
from mixle_mpi.core.errors import WorkerError
from mixle_mpi.core.estep import PROTO
from mixle_mpi.core.protocol import Release, Result, Skip, Stats, Task
from mixle_mpi.policy.pacing import round_window
from mixle_mpi.policy.round_plan import Done, NeedWorkers, Recover, RoundState
from mixle_mpi.policy.speculation_plan import busy_workers, plan_copies

_TASK_IDS = itertools.count(1)
SPECULATE_EVERY = (
    0.02  # seconds between two looks for stragglers while a round waits (O(W + S) each)
)


class Round:
    """Every shard's result for one call, exact whatever fails meanwhile.

    ``preloaded`` results (from a fold journal) are not recomputed; ``record(shard, result)``
    is called for each result as it arrives (the journal), and so is ``fold(shard, result)``
    (for every result, the preloaded ones first). ``body``: the round's objects (the driver's
    own share computes with them); ``body_pickled``: ``body`` pickled already. ``scores``: an
    E-step round that also serves the next scoring call (policy/lookahead.py); each shard's
    score lands there."""

    def __init__(
        self,
        driver,
        kind: str,
        body: Any,
        extras: dict[int, Any] | None = None,
        preloaded: dict[int, Any] | None = None,
        record: Callable | None = None,
        fold: Callable | None = None,
        body_pickled: bytes | None = None,
        scores: dict[int, Any] | None = None,
    ) -> None:
        self.d = driver
        self.kind, self.body, self.extras = kind, body, extras or {}
        self.preloaded, self.record, self.fold, self.scores = preloaded, record, fold, scores
        self.body_pickled = body_pickled
        self.results: dict[int, Any] = dict(preloaded or {})
        self.here: list[
            int
        ] = []  # the driver's own shards this round (known once its joins are finished)
        self.state: RoundState  # made by run(), once the driver's share is known
        self.seen_live: dict[int, int] | None = (
            None  # the live processes at the last Wait; None: sent since
        )
        self.call = self.score_call = -1
        self.task_id = 0
        self.sent_at: dict[int, float] = {}  # worker -> when its own task went out (clock)
        self.done_by: dict[int, int] = {}  # worker -> its shards accepted this round
        self.skips: dict[int, list[int]] = {}  # worker -> shards it may leave out: a copy won them
        self.look_at = 0.0  # the next look for stragglers (clock)
        self.projected = 0.0  # when the stragglers would have ended without copies (clock)
        self.copied: dict[
            int, tuple
        ] = {}  # shard -> (worker, incarnation) sent a speculative copy (kept there)

    def run(self) -> dict[int, Any]:
        d, kind = self.d, self.kind
        t0, started_at = time.perf_counter(), time.time()
        due = round_window(clock.monotonic(), d.round_seconds.get(kind))
        self._number()
        d.arrivals.finish_joins()
        self.here = [s for s in d.places.here if s not in self.results]
        self.state = RoundState(d.num_shards, frozenset(self.results), frozenset(self.here))
        self.task_id = next(_TASK_IDS)
        if self.body_pickled is None:
            self.body_pickled = pickle.dumps(self.body, protocol=PROTO)
        d.body_pickled = self.body_pickled
        failed_before = set(d.pending)
        for shard in sorted(self.results):
            self._keep(shard, self.results[shard], self.state.fold_once(shard))
        self._send_own()
        self._compute_here()
        d.mail.wait(self.step, due)
        t_results = time.perf_counter()
        failed_now = sorted(d.pending - failed_before)
        if (
            not failed_now and not self.state.recomputed
        ):  # a normal round: when the next one's replies are due
            d.round_seconds[kind] = t_results - t0
        saved = self._speculation_report(clock.monotonic())
        self._settle_copies()
        blacklisted = d.reconfigure() if (d.pending or d.arrivals.spawns_failed()) else []
        rebalanced = d.settings.speculation and kind == "estep" and d.reconfiguring.rebalance()
        d.rounds.append(
            {
                "kind": kind,
                "call": self.call,
                "seconds": time.perf_counter() - t0,
                "started_at": started_at,
                "results_seconds": t_results - t0,  # the rest of "seconds" is the reconfiguration
                "reused": self.state.reused,
                "recomputed": sorted(self.state.recomputed),
                "journaled": sorted(self.preloaded or ()),
                "scored": self.score_call >= 0,
                "failed": failed_now,
                "blacklisted": blacklisted,
                "speculated": sorted(
                    s for s, c in self.state.copies.items() if c or s in self.state.won
                ),
                "speculation_won": sorted(self.state.won),
                "saved_seconds": saved,
                "rebalanced": bool(rebalanced),
            }
        )
        return self.results

    def _number(self) -> None:
        """This call's number per kind (the fault plans and the events count calls), and the
        driver's own chaos before it sends the round out."""
        d, kind = self.d, self.kind
        self.call = d.calls[kind]
        d.calls[kind] += 1
        if self.scores is not None:
            self.score_call = d.calls["llsum"]
            d.calls["llsum"] += 1
            d.faults.check("llsum", self.score_call)
        if kind in ("estep", "llsum"):
            d.faults.check("estep_before" if kind == "estep" else "llsum", self.call)

    # -- results -------------------------------------------------------------------
    def _keep(self, shard: int, payload, folds: bool) -> None:
        """``shard``'s E-step payload (or result), folded if the round says so: each shard's
        first only (``RoundState.fold_once``, ``take_stats``)."""
        self.results[shard] = payload
        if folds and self.fold is not None:
            self.fold(shard, payload)

    def _take(self, shard: int, payload) -> None:
        """An accepted result, from a worker or computed here."""
        if self.scores is not None:
            payload, self.scores[shard] = payload
            if payload is None:  # its E-step payload came ahead (protocol.Stats) and is folded
                payload = self.results.get(shard)
                if payload is None or shard not in self.state.folded:
                    raise RuntimeError(
                        f"shard {shard}: a result without its E-step payload, and none came ahead"
                    )
        self._keep(shard, payload, self.state.fold_once(shard))
        if self.record is not None:
            self.record(shard, payload)
            if self.kind == "estep" and len(self.results) < self.d.num_shards:
                self.d.faults.check("estep_mid", self.call)

    def _take_replies(self, worker: int, msgs: list, live: dict[int, int]) -> bool:
        """A worker's replies of this round (its Stats sent ahead and its Results)."""
        incarnation = self.d.membership.records[worker].incarnation
        progressed = False
        for msg in msgs:
            if isinstance(msg, Stats) and msg.task_id == self.task_id:
                if self.state.take_stats(worker, incarnation, msg.shard, live):
                    self._keep(msg.shard, msg.payload, True)
                    progressed = True
                continue
            if not isinstance(msg, Result) or msg.task_id != self.task_id:
                continue
            if live.get(worker) == incarnation:
                self._note_paces(worker, incarnation, msg)
            for shard, payload in msg.results:
                if self.state.accept(worker, incarnation, shard, live):
                    self._won(worker, incarnation, shard, live)
                    self._take(shard, payload)
                    progressed = True
        return progressed

    def _note_paces(self, worker: int, incarnation: int, msg: Result) -> None:
        """Each result's compute seconds: a place's own shards time its pace, a speculative
        copy (rows encoded too) what copies cost (policy/speculation_plan.Paces)."""
        for (shard, _), seconds in zip(msg.results, msg.seconds, strict=False):
            if (worker, incarnation) in self.state.copies.get(shard, ()):
                self.d.paces.note_copy(self.kind, seconds)
            else:
                self.d.paces.note(self.kind, worker, seconds)

    def _won(self, worker: int, incarnation: int, shard: int, live: dict[int, int]) -> None:
        """``shard`` accepted from this process: the other live processes computing it (a
        straggler, or a copy's holder) are told to skip it (``_send_skips``)."""
        if self.state.assigned.get(shard) == (worker, incarnation):
            self.done_by[worker] = self.done_by.get(worker, 0) + 1
        for w, inc in self.state.holders(shard):
            if (w, inc) != (worker, incarnation) and live.get(w) == inc:
                self.skips.setdefault(w, []).append(shard)

    def _send_skips(self) -> None:
        for w, shards in sorted(self.skips.items()):
            self.d.mail.post(w, Skip(self.task_id, tuple(sorted(shards))), announce=False)
        self.skips.clear()

    # -- speculation ---------------------------------------------------------------
    def _speculate(self, live: dict[int, int]) -> None:
        """Copies of stragglers' outstanding shards on the idle workers, when the plan says so
        (policy/speculation_plan.py); looked at every SPECULATE_EVERY seconds at most."""
        d, now = self.d, clock.monotonic()
        if not d.settings.speculation or now < self.look_at:
            return
        self.look_at = now + SPECULATE_EVERY
        idle = self.state.idle(live)
        if not idle:
            return
        typical = d.paces.typical(self.kind, idle) or d.paces.typical(self.kind, live)
        copied = [s for s, c in self.state.copies.items() if c]
        busy = busy_workers(
            self.state.outstanding(live),
            copied,
            self.done_by,
            self.sent_at,
            now,
            d.paces,
            self.kind,
        )
        multiplier = d.settings.speculation_multiplier * d.contention
        copies = plan_copies(busy, idle, typical, multiplier, d.paces.copy_cost(self.kind))
        if not copies.plan:
            return
        self.projected = max(self.projected, now + max(copies.projected.values()))
        for target, sids in sorted(copies.plan.items()):
            self._dispatch(target, sids, False, copy=True)
        d.mail.announce(sorted(copies.plan))
        slow = {b.worker: round(b.seen_pace, 6) for b in busy if b.worker in copies.projected}
        d.events.emit(
            "speculated",
            kind=self.kind,
            call=self.call,
            copies={w: sorted(ss) for w, ss in copies.plan.items()},
            stragglers=slow,
            typical=round(typical, 6),
        )

    def _settle_copies(self) -> None:
        """A copy is kept where it was computed until the round ends: if its shard's place
        failed meanwhile, it stays kept there for the place (``Places.keep_copy``), as a recovered
        shard does, so the next round and an adopting spare need no load; else it is dropped."""
        d = self.d
        if not self.copied:
            return
        live = d.live_processes()
        place = d.places.place_of()
        drop: dict[int, list[int]] = {}
        for s, (holder, incarnation) in sorted(self.copied.items()):
            if (
                live.get(holder) != incarnation
                or holder == place.get(s)
                or d.places.kept_at(s, holder)
            ):
                continue  # gone, or the shard is its own or kept there for a place: it stays
            if place.get(s) in live and place.get(s) not in d.pending:
                drop.setdefault(holder, []).append(s)
            else:
                d.places.keep_copy(s, holder)
        for holder, sids in drop.items():
            d.mail.post(holder, Release(tuple(sids)))

    def _speculation_report(self, ended: float) -> float:
        """The seconds speculation saved this round, estimated from the stragglers' own pace
        (when they would have ended without copies, less when the round ended), and an event."""
        if not self.state.won and not self.projected:
            return 0.0
        saved = round(max(0.0, self.projected - ended), 6)
        won = sorted(self.state.won)
        self.d.events.emit(
            "speculation_won",
            kind=self.kind,
            call=self.call,
            shards=won,
            by={s: self.state.won[s][0] for s in won},
            saved_seconds=saved,
        )
        return saved

    # -- sending -------------------------------------------------------------------
    def _dispatch(self, worker: int, sids: list[int], recovery: bool, copy: bool = False) -> None:
        """A task for ``worker``. A recovered shard stays encoded on its survivor: it computes
        it again next round while the place's replacement joins, or keeps it if it adopts or
        inherits it; a speculative ``copy`` is kept until the round ends (``_settle_copies``). The caller rings
        the workers sent to (``announce``), all at once."""
        d = self.d
        self.seen_live = None
        keep = recovery or copy  # its rows travel with it, and it stays encoded there
        items = [(s, d.store.read_packed(s) if keep else None, self.extras.get(s)) for s in sids]
        task = Task(
            self.task_id, self.kind, self.call, self.body_pickled, items, keep, self.score_call
        )
        if not d.mail.post(worker, task, announce=False):
            return
        if copy:
            self.copied.update(
                (s, (worker, d.membership.records[worker].incarnation)) for s in sids
            )
        if not recovery and not copy:
            self.sent_at.setdefault(worker, clock.monotonic())
        if recovery:
            d.places.keep(sids, worker)
        self.state.sent(worker, d.membership.records[worker].incarnation, sids, recovery, copy=copy)
        if recovery:
            d.events.emit("recovery", worker=worker, kind=self.kind, call=self.call, shards=sids)
            if (
                self.kind == "estep"
            ):  # the driver's own chaos, while a worker's shards are recovered
                d.faults.check("estep_mid", self.call, True)

    def _send_own(self) -> None:
        """Each live worker's own shards (its resident ones), all rung at once."""
        d = self.d
        live = d.live_processes()
        own = self.state.own_work(d.places.work(live), live)
        for w, sids in own.items():
            self._dispatch(w, sids, False)
        d.mail.announce(list(own))

    # -- waiting -------------------------------------------------------------------
    def step(self) -> bool | None:
        """One poll, O(W) while nothing changes: drain the workers the round waits for, then
        ask the round what to do only if membership changed or a task went out since the
        last Wait (otherwise only Done is possible; see RoundState.next_step)."""
        d = self.d
        progressed = d.arrivals.advance_joins()
        live = d.live_processes()
        for w, msgs in d.mail.gather(self.state.waiting_on()).items():
            progressed = self._take_replies(w, msgs, live) or progressed
        if self.skips:
            self._send_skips()
        d.check_failures()
        if self.state.done():
            return None
        live = d.live_processes()
        self._speculate(live)
        if live == self.seen_live:
            return progressed
        action = self.state.next_step(d.places.work(live), live)
        if isinstance(action, Done):
            return None
        if isinstance(action, NeedWorkers):
            d.reconfigure()  # respawns whom it can; the next step recovers onto them
            d.arrivals.await_a_worker()
            return True
        if isinstance(action, Recover):
            for target, sids in action.plan.items():
                self._dispatch(target, sids, True)
            d.mail.announce(list(action.plan))
            return True
        self.seen_live = live  # Wait
        return progressed

    def _compute_here(self) -> None:
        """The driver's own share, while the workers compute theirs.

        ``body`` itself, as rank 0 of mixle's own MPI handle computes with the objects: an
        E-step reads the model and makes fresh accumulators, and a pickle round trip keeps
        every float, so the bits are the workers' (an unpickle here cost up to 0.2 ms)."""
        if not self.here:
            return
        d = self.d
        chunks = d.encoded_here()
        for i, shard in enumerate(self.here):
            if i:
                self.step()  # between shards: take replies, act on failures
            try:  # its E-step payload is folded with its result: nothing waits for it here
                result = estep.shard_result(
                    self.kind,
                    self.body,
                    chunks[shard],
                    self.extras.get(shard),
                    self.scores is not None,
                    engine=d.settings.engine,
                )
            except (
                Exception
            ) as exc:  # as a worker's task error: the model's code raised, on any rank it would
                raise WorkerError(0, d.host, os.getpid(), traceback.format_exc()) from exc
            self._take(shard, result)
            self.state.done_here(shard)
