"""The thin MPI layer: links to peers, tagged pickled messages, failure-aware polling.

Everything here only moves bytes and reports MPI errors; what to do about them is decided
elsewhere. All waits are polls with a sleeping backoff (never a busy spin, never a blocking
receive without a deadline).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from mpi4py import MPI

from mixle_mpi.core import liveness, probes
from mixle_mpi.core.protocol import TAG_CMD, Abort
from mixle_mpi.policy.pacing import Pacing

RECV_WITHIN = 30.0  # seconds a matched message may take to arrive whole (one whose sender died sending it: never)
MAX_PENDING_BEATS = (
    8  # per link: a dead peer's heartbeats never complete, and each keeps an MPICH cell
)


class PeerFailed(Exception):
    """An MPI operation with a peer raised: under ULFM that peer is dead."""

    def __init__(self, error_class: int, detail: str) -> None:
        super().__init__(f"MPI error class {error_class}: {detail}")
        self.error_class = error_class


def matched_probe(comm: Any, source: int, tag: int, status: Any = None) -> Any:
    """``comm.improbe``, once more when it finds nothing: a probe that finds nothing has just
    progressed the transport, which may have brought a message in that only the next probe
    matches (Open MPI). A message a doorbell announced is then taken on the first pass."""
    msg = comm.improbe(source=source, tag=tag, status=status)
    return msg if msg is not None else comm.improbe(source=source, tag=tag, status=status)


_abandoned: list = []  # receives of messages that never arrived whole: kept, never freed while active


def receive(msg: Any, within: float = RECV_WITHIN) -> Any:
    """The object of a matched message (``improbe``), never waited for without end: a large
    message whose sender died while sending it never arrives whole (MPICH), and a blocking
    receive would stop this thread for good (and, under MPICH's global lock, every other).
    Raises PeerFailed past ``within`` seconds."""
    req = msg.irecv()
    done, obj = req.test()
    if done:
        return obj
    end, backoff = time.monotonic() + within, Backoff()
    while time.monotonic() < end:
        backoff.sleep()
        done, obj = req.test()
        if done:
            return obj
    _abandoned.append(req)
    raise PeerFailed(
        0,
        f"a message from this peer did not arrive whole within {within:g} s "
        "(its sender died while sending it)",
    )


@dataclass
class Link:
    """How one side reaches its peer: data and heartbeat communicators and the peer's rank.

    ``inter`` is the parent/child intercommunicator of a spawned worker, which both sides
    must disconnect at the end.
    """

    comm: Any
    hb: Any
    peer: int
    inter: Any = None
    sends: list = field(default_factory=list)
    hb_sends: list = field(default_factory=list)

    def post(self, obj: Any, tag: int = TAG_CMD) -> None:
        """Non-blocking send; the request is kept until it completes (see ``progress``)."""
        probes.mark("message_posted", tag, obj)
        try:
            self.sends.append(self.comm.isend(obj, dest=self.peer, tag=tag))
        except MPI.Exception as exc:
            raise PeerFailed(exc.Get_error_class(), str(exc)) from None

    def progress(self) -> bool:
        """Complete finished sends; True once none is pending."""
        if self.sends:
            try:
                self.sends = [r for r in self.sends if not r.Test()]
            except MPI.Exception as exc:
                raise PeerFailed(exc.Get_error_class(), str(exc)) from None
        return not self.sends

    @probes.spanned("message_polled")
    def poll(self, tag: int, comm: Any = None) -> Any:
        """One pending message from the peer with ``tag``, or None; raises PeerFailed on ULFM errors."""
        comm = self.comm if comm is None else comm
        try:
            msg = matched_probe(comm, self.peer, tag)
            return None if msg is None else receive(msg)
        except MPI.Exception as exc:
            raise PeerFailed(exc.Get_error_class(), str(exc)) from None

    def drain(self, tag: int, comm: Any = None) -> list:
        """Every pending message from the peer with ``tag`` (payloads may be None: a
        driver's heartbeat answer is); raises PeerFailed on ULFM errors."""
        comm = self.comm if comm is None else comm
        got = []
        try:
            while (msg := matched_probe(comm, self.peer, tag)) is not None:
                got.append(receive(msg))
        except MPI.Exception as exc:
            raise PeerFailed(exc.Get_error_class(), str(exc)) from None
        return got


@dataclass
class Backoff(Pacing):
    """Sleep between polls, growing from ``low`` to ``high`` seconds; reset on progress; short
    sleeps inside the ``window`` where a message is due (``policy/pacing.py``).

    The cap bounds the latency a poll adds to a round (1 ms) while an idle rank still
    sleeps almost all the time: a blocking MPI receive would spin a core instead. With a
    ``bell`` (``runtime/doorbell.py``) a ring ends the sleep at once and the next poll
    comes soon after it."""

    bell: Any = None

    def sleep(self, pass_seconds: float = 0.0) -> None:
        liveness.mark()
        delay = self.next_delay(time.monotonic(), pass_seconds)
        if self.bell is None:
            time.sleep(delay)
        elif self.bell.wait(delay):
            self.reset()


ABORT_SEND_WAIT = 2.0  # seconds a failing driver waits for its abort messages to leave


def abort_peers(comm: Any, ranks, code: int, wait: float = ABORT_SEND_WAIT) -> None:
    """Best effort, bounded: tell ``ranks`` of ``comm`` to end with ``code``."""
    links = [Link(comm, comm, r) for r in ranks]
    for link in links:
        try:
            link.post(Abort(int(code)))
        except PeerFailed:
            pass
    finish_sends(links, wait)


def finish_sends(links, wait: float) -> None:
    """Wait at most ``wait`` seconds for the pending sends of ``links``; failed peers are skipped."""
    deadline = time.monotonic() + wait
    backoff = Backoff()
    pending = list(links)
    while pending and time.monotonic() < deadline:
        still = []
        for link in pending:
            try:
                if not link.progress():
                    still.append(link)
            except PeerFailed:
                pass
        pending = still
        if pending:
            backoff.sleep()


def host_and_pid() -> tuple[str, int]:
    return MPI.Get_processor_name(), os.getpid()
