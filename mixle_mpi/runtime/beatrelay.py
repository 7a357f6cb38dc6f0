"""A worker's side of heartbeat fan-in (policy/fanin_plan.py), run by its heartbeat thread.

A direct worker beats to the driver as always. A member beats to its relay and learns from
the relay's answers how long ago the relay heard the driver. A relay hears its members,
answers them, and puts their lines in its own beat. Trouble with a relay or a member is
never taken for the driver's death: the driver sees a dead relay itself and gives its
members new roles; a member's failure goes into the relay's next beat.
"""

from __future__ import annotations

from mpi4py import MPI

from mixle_mpi.core.protocol import TAG_HB, Beat
from mixle_mpi.policy.fanin_plan import DIRECT, MemberBook, RelayBack, Relayed, Role
from mixle_mpi.policy.heartbeat import answer_due
from mixle_mpi.runtime.transport import MAX_PENDING_BEATS, Link


class BeatRelay:
    def __init__(self) -> None:
        self.role = DIRECT
        self.book = MemberBook()
        self._hb = None  # the communicator the role was given on
        self._sends: dict[int, list] = {}  # rank -> pending sends to the relay or a member

    @property
    def relaying(self) -> bool:
        return bool(self.role.members)

    def on(self, link: Link) -> None:
        """The link in use now; roles given on another communicator (before a shrink) end."""
        if link.hb is not self._hb:
            self._hb = link.hb
            self.take(DIRECT)

    def take(self, msg) -> None:
        """A message from the driver on the heartbeat channel: a new role, or a plain answer."""
        if isinstance(msg, Role):
            self.role = msg
            self.book.assign(msg.members)
            self._sends = {
                r: s for r, s in self._sends.items() if r == msg.relay or r in self.book.members
            }

    def report(self) -> tuple[Relayed, ...]:
        return self.book.report() if self.relaying else ()

    def beat(self, link: Link, beat: Beat) -> None:
        """Send ``beat`` where the role says. To the driver, MPI errors reach the caller (the
        driver may be dead); to a relay they do not (the driver will reassign this worker)."""
        if self.role.relay is None:
            link.hb_sends = [r for r in link.hb_sends if not r.Test()]
            if len(link.hb_sends) < MAX_PENDING_BEATS:
                link.hb_sends.append(link.hb.isend(beat, dest=link.peer, tag=TAG_HB))
            return
        self._send(link, self.role.relay, beat)

    def exchange(self, link: Link, driver_age: float) -> float | None:
        """Hear the relay (a member) or the members (a relay) and answer them. Returns the
        freshest driver age the relay reported, if any."""
        age = None
        if self.role.relay is not None:
            for back in self._drain(link, self.role.relay):
                if isinstance(back, RelayBack):
                    age = back.driver_age if age is None else min(age, back.driver_age)
        for rank in list(self.book.members):
            try:
                beats = self._drain(link, rank, quiet=False)
            except MPI.Exception as exc:  # ULFM: that member is dead
                self.book.failed(rank, str(exc))
                continue
            for beat in beats:
                if isinstance(beat, Beat):
                    self.book.heard(rank, beat.progress, beat.busy)
            if answer_due(len(beats), False):  # a dead member is sent nothing more
                self._send(link, rank, RelayBack(driver_age))
        return age

    @staticmethod
    def _drain(link: Link, rank: int, quiet: bool = True) -> list:
        got = []
        try:
            while (msg := link.hb.improbe(source=rank, tag=TAG_HB)) is not None:
                got.append(msg.recv())
        except MPI.Exception:
            if not quiet:
                raise
        return got

    def _send(self, link: Link, rank: int, obj) -> None:
        """Best effort, bounded: a dead peer's sends may never complete (MPICH)."""
        try:
            pending = [r for r in self._sends.get(rank, []) if not r.Test()]
            if len(pending) < MAX_PENDING_BEATS:
                pending.append(link.hb.isend(obj, dest=rank, tag=TAG_HB))
            self._sends[rank] = pending
        except MPI.Exception:
            self._sends.pop(rank, None)
