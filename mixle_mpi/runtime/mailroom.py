"""The driver's side of every message to and from its workers.

The driver decides what to send and what a reply means; this carries it: one link per
worker, the doorbells that wake a sleeping worker (and the driver), replies drained link by
link or, where several workers share a communicator, by one wildcard probe, and the
driver's one sleeping wait loop. An MPI error with a worker is not decided here: it is
handed to ``fail(worker, cause)``, the driver's, which fences the worker and calls
:meth:`Mailroom.forget`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mpi4py import MPI

from mixle_mpi.core import liveness, probes
from mixle_mpi.core.errors import WorkerError
from mixle_mpi.core.protocol import TAG_CMD, TAG_REPLY, Result, TaskError
from mixle_mpi.policy.pacing import NEVER
from mixle_mpi.runtime.transport import Backoff, Link, PeerFailed, matched_probe, receive

Fail = Callable[[int, str], None]  # (worker, cause): the driver fences it
Step = Callable[
    [], "bool | None"
]  # one pass of a wait: True progress, False nothing yet, None done


class Mailroom:
    def __init__(
        self, links: dict[int, Link], bell: Any, fail: Fail, idle: Callable[[], None] | None = None
    ) -> None:
        self.links = links  # worker -> how to reach it (its current process)
        self.bell = bell  # the driver's own doorbell, rung by its host's workers; or None
        self.bells: dict[
            int, str
        ] = {}  # worker -> its doorbell (Ready.bell): rung after each command
        self.stash: dict[int, list] = {}  # worker -> replies a wildcard probe took for it
        self.per_link: dict[
            int, Any
        ] = {}  # communicators drained link by link (ULFM, after a failure)
        self.peak_rss_mb: dict[int, float] = {}  # worker -> highest peak RSS its processes reported
        self.fail = fail
        self.idle = idle  # the pause between polls that made no progress; None: a Backoff's sleep

    # -- who is reachable ----------------------------------------------------------
    def connect(self, worker: int, link: Link) -> None:
        """``worker``'s process is now the one on ``link`` (a shrink, a replacement, an adopted spare)."""
        self.links[worker] = link

    def forget(self, worker: int) -> None:
        """Nothing is sent to or taken from ``worker`` again (failed, or its place was adopted)."""
        self.links.pop(worker, None)
        self.bells.pop(worker, None)
        self.stash.pop(worker, None)

    def rename(self, old: int, new: int) -> None:
        """The process reached as ``old`` answers as ``new`` from now on (a spare adopting a
        place): its link and its doorbell go with it, so the Setup that tells it is rung."""
        link, bell = self.links.get(old), self.bells.get(old)
        self.forget(old)
        if link is not None:
            self.links[new] = link
        if bell:
            self.bells[new] = bell

    def note_bell(self, worker: int, bell: str) -> None:
        """``worker``'s doorbell from its Ready ("" if it has none: it is polled)."""
        if bell:
            self.bells[worker] = bell
        else:
            self.bells.pop(worker, None)

    # -- sending -------------------------------------------------------------------
    def post(self, worker: int, msg, announce: bool = True) -> bool:
        """Send ``msg``; ring the worker now, or (``announce=False``) at the caller's
        :meth:`announce` together with the others of a round."""
        link = self.links.get(worker)
        if link is None:
            return False
        try:
            link.post(msg, TAG_CMD)
        except PeerFailed as exc:
            self.fail(worker, f"ulfm: send failed ({exc})")
            return False
        if announce:
            self.announce([worker])
        return True

    @probes.spanned("workers_rung")
    def announce(self, workers: list[int]) -> None:
        """Ring the bells of ``workers`` just sent a message, all in one system call
        (``Doorbell.ring_all``: on an oversubscribed node the first one woken may take this
        core, and the others would wait for it)."""
        due = []
        for w in workers:
            link = self.links.get(w)
            if w not in self.bells or link is None:
                continue
            try:
                link.progress()  # MPI moves a small message on at a progress call: the ring comes after it
            except PeerFailed as exc:
                self.fail(w, f"ulfm: send failed ({exc})")
                continue
            due.append(w)
        for w, reached in zip(
            due, self.bell.ring_all([self.bells[w] for w in due]) if due else (), strict=False
        ):
            if not reached:
                del self.bells[w]  # unreachable after all (another network namespace): polled

    def sent(self, worker: int) -> bool | None:
        """True once every send to ``worker`` completed; None if it failed meanwhile."""
        link = self.links.get(worker)
        if link is None:
            return None
        try:
            return link.progress()
        except PeerFailed as exc:
            self.fail(worker, f"ulfm: {exc}")
            return None

    # -- receiving -----------------------------------------------------------------
    @probes.spanned("reply_taken")
    def take(self, worker: int, msg) -> Any:
        """What every reply goes through, however it was received."""
        if isinstance(msg, TaskError):
            raise WorkerError(worker, msg.host, msg.pid, msg.text)
        if isinstance(msg, Result):
            self.peak_rss_mb[worker] = max(self.peak_rss_mb.get(worker, 0.0), msg.peak_rss_mb)
        return msg

    def drain(self, worker: int) -> list:
        """Every reply waiting from ``worker`` (those a wildcard probe took for it first); a
        ULFM error fails the worker instead."""
        link = self.links.get(worker)
        out: list = self.stash.pop(worker, [])
        if link is None:
            return out
        try:
            link.progress()
            while True:
                msg = link.poll(TAG_REPLY)
                if msg is None:
                    return out
                out.append(self.take(worker, msg))
        except PeerFailed as exc:
            self.fail(worker, f"ulfm: {exc}")
            return out

    def gather(self, workers: list[int]) -> dict[int, list]:
        """The replies waiting from ``workers``: O(messages) where several of them share one
        communicator (one wildcard probe drains it), O(workers) otherwise (a replacement's own
        communicator, a kept view). A reply the wildcard takes from a worker not asked about
        waits in ``stash`` for that worker's next drain. Under ULFM a wildcard probe fails
        while a failure is unacknowledged: that communicator is then drained link by link."""
        groups: dict[int, tuple[Any, list[int]]] = {}
        for w in workers:
            link = self.links.get(w)
            if (
                link is not None
                and isinstance(link.comm, MPI.Intracomm)
                and id(link.comm) not in self.per_link
            ):
                groups.setdefault(id(link.comm), (link.comm, []))[1].append(w)
        got: dict[int, list] = {}
        for comm, ws in groups.values():
            if len(ws) >= 2:
                got.update(self._wildcard(comm, ws))
        for w in workers:
            if w not in got:
                got[w] = self.drain(w)
        return got

    def _wildcard(self, comm: Any, workers: list[int]) -> dict[int, list]:
        """``gather``'s drain of one shared communicator; {} if the probe failed (ULFM)."""
        by_peer = {link.peer: w for w, link in self.links.items() if link.comm is comm}
        got: dict[int, list] = {w: self.stash.pop(w, []) for w in workers}
        for w in workers:
            self.sent(w)  # a pending send may need this side's progress before its reply comes
        status = MPI.Status()
        while True:
            try:
                msg = matched_probe(comm, MPI.ANY_SOURCE, TAG_REPLY, status)
                payload = None if msg is None else receive(msg)
            except PeerFailed as exc:  # its sender died while sending it
                w = by_peer.get(status.Get_source())
                if w is not None and w in self.links:
                    self.fail(w, str(exc))
                continue
            except MPI.Exception:  # ULFM: a failure not acknowledged yet; the links will say whose
                self.per_link[id(comm)] = comm
                for w, ms in got.items():
                    if ms:
                        self.stash.setdefault(w, [])[:0] = ms
                return {}
            if msg is None:
                return got  # (a worker failed meanwhile is there too: its replies are refused by the round)
            w = by_peer.get(status.Get_source())
            if w is None or w not in self.links:
                continue  # a rank no longer any worker's (failed and fenced): never heard again
            (got[w] if w in got else self.stash.setdefault(w, [])).append(self.take(w, payload))

    # -- waiting -------------------------------------------------------------------
    def rung(self) -> bool:
        """Whether a ring will end any wait: every worker rings the driver after each reply
        (it is on this host), and no send of the driver's is still pending (a large message
        may need its sender's progress: it is polled for)."""
        return self.bell is not None and all(
            w in self.bells and not link.sends for w, link in self.links.items()
        )

    def wait(self, step: Step, window: tuple[float, float] = NEVER) -> None:
        """The driver's one wait loop: ``step()`` does one pass and returns True (progress),
        False (nothing yet: sleep a little, never spin) or None (done). Each caller's step
        carries its own deadline; ``window`` is when replies are due (polled finely, unless
        every reply comes with a ring of the driver's doorbell)."""
        if self.idle is not None:  # a simulated world: its next event instead of a sleep
            while (progressed := step()) is not None:
                if not progressed:
                    self.idle()
            return
        backoff = Backoff(window=window, bell=self.bell)
        while True:
            liveness.mark()
            probes.mark("driver_poll")
            t = time.thread_time()  # the pass's own CPU: time descheduled is not its cost
            progressed = step()
            if progressed is None:
                return
            if progressed:
                backoff.reset()
            else:
                backoff.rung = self.rung()
                backoff.sleep(
                    time.thread_time() - t
                )  # an O(W) pass: never poll more than a share of a core
