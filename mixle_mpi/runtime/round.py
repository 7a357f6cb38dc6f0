"""One call's round on the driver: send the shards out, take the replies, recover what fails.

The decisions are ``policy.rounds.RoundState``'s (who computes what, which reply counts, what
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
from mixle_mpi.core.protocol import Result, Stats, Task
from mixle_mpi.policy.join_plan import work_of
from mixle_mpi.policy.pacing import round_window
from mixle_mpi.policy.rounds import Done, NeedWorkers, Recover, RoundState

_TASK_IDS = itertools.count(1)


class Round:
    """Every shard's result for one call, exact whatever fails meanwhile.

    ``preloaded`` results (from a fold journal) are not recomputed; ``record(shard, result)``
    is called for each result as it arrives (the journal), and so is ``fold(shard, result)``
    (for every result, the preloaded ones first). ``body``: the round's objects (the driver's
    own share computes with them); ``body_b``: ``body`` pickled already. ``scores``: an
    E-step round that also serves the next scoring call (policy/lookahead.py); each shard's
    score lands there."""

    def __init__(self, driver, kind: str, body: Any, extras: dict[int, Any] | None = None,
                 preloaded: dict[int, Any] | None = None, record: Callable | None = None,
                 fold: Callable | None = None, body_b: bytes | None = None,
                 scores: dict[int, Any] | None = None) -> None:
        self.d = driver
        self.kind, self.body, self.extras = kind, body, extras or {}
        self.preloaded, self.record, self.fold, self.scores = preloaded, record, fold, scores
        self.body_b = body_b
        self.results: dict[int, Any] = dict(preloaded or {})
        self.here: list[int] = []  # the driver's own shards this round (known once its joins are finished)
        self.state: RoundState  # made by run(), once the driver's share is known
        self.seen_live: dict[int, int] | None = None  # the live processes at the last Wait; None: sent since
        self.call = self.score_call = -1
        self.task_id = 0

    def run(self) -> dict[int, Any]:
        d, kind = self.d, self.kind
        t0, started_at = time.perf_counter(), time.time()
        due = round_window(clock.monotonic(), d.round_seconds.get(kind))
        self._number()
        d.arrivals.finish_joins()
        self.here = [s for s in d.here if s not in self.results]
        self.state = RoundState(d.num_shards, frozenset(self.results), frozenset(self.here))
        self.task_id = next(_TASK_IDS)
        if self.body_b is None:
            self.body_b = pickle.dumps(self.body, protocol=PROTO)
        d.body_b = self.body_b
        failed_before = set(d.pending)
        for shard in sorted(self.results):
            self._keep(shard, self.results[shard], self.state.fold_once(shard))
        self._send_own()
        self._compute_here()
        d.mail.wait(self.step, due)
        t_results = time.perf_counter()
        failed_now = sorted(d.pending - failed_before)
        if not failed_now and not self.state.recomputed:  # a normal round: when the next one's replies are due
            d.round_seconds[kind] = t_results - t0
        blacklisted = d.reconfigure() if (d.pending or d.arrivals.spawn_failed) else []
        d.rounds.append({
            "kind": kind, "call": self.call, "seconds": time.perf_counter() - t0, "started_at": started_at,
            "results_seconds": t_results - t0,  # the rest of "seconds" is the reconfiguration
            "reused": self.state.reused, "recomputed": sorted(self.state.recomputed),
            "journaled": sorted(self.preloaded or ()), "scored": self.score_call >= 0,
            "failed": failed_now, "blacklisted": blacklisted,
        })
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
                    raise RuntimeError(f"shard {shard}: a result without its E-step payload, and none came ahead")
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
            for shard, payload in msg.results:
                if self.state.accept(worker, incarnation, shard, live):
                    self._take(shard, payload)
                    progressed = True
        return progressed

    # -- sending -------------------------------------------------------------------
    def _dispatch(self, worker: int, sids: list[int], recovery: bool) -> None:
        """A task for ``worker``. A recovered shard stays encoded on its survivor: it computes
        it again next round while the place's replacement joins, or keeps it if it adopts or
        inherits it. The caller rings the workers sent to (``announce``), all at once."""
        d = self.d
        self.seen_live = None
        items = [(s, d.store.read_packed(s) if recovery else None, self.extras.get(s)) for s in sids]
        task = Task(self.task_id, self.kind, self.call, self.body_b, items, recovery, self.score_call)
        if not d.mail.post(worker, task, announce=False):
            return
        if recovery:
            d.kept.update((s, worker) for s in sids)
        self.state.sent(worker, d.membership.records[worker].incarnation, sids, recovery)
        if recovery:
            d.events.emit("recovery", worker=worker, kind=self.kind, call=self.call, shards=sids)
            if self.kind == "estep":  # the driver's own chaos, while a worker's shards are recovered
                d.faults.check("estep_mid", self.call, True)

    def _send_own(self) -> None:
        """Each live worker's own shards (its resident ones), all rung at once."""
        d = self.d
        live = d.live_processes()
        own = self.state.own_work(work_of(d.owners, d.kept, live), live)
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
        d.check_failures()
        if self.state.done():
            return None
        live = d.live_processes()
        if live == self.seen_live:
            return progressed
        action = self.state.next_step(work_of(d.owners, d.kept, live), live)
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
                result = estep.shard_result(self.kind, self.body, chunks[shard], self.extras.get(shard),
                                            self.scores is not None)
            except Exception as exc:  # as a worker's task error: the model's code raised, on any rank it would
                raise WorkerError(0, d.host, os.getpid(), traceback.format_exc()) from exc
            self._take(shard, result)
            self.state.done_here(shard)
