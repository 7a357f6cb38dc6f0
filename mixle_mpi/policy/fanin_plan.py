"""Heartbeat fan-in: above a threshold, workers beat to a relay worker instead of the driver.

The driver hears every worker itself while at most ``max_direct`` share one heartbeat
communicator. Above that, those workers are split into at most ``max_direct`` groups of
consecutive ids; the first worker of each group is its relay. Members beat to their relay;
the relay sends the driver one beat that carries, for each member, how long ago it last
heard it (:class:`MemberBook`). So the driver receives at most ``max_direct`` beats per
relay period whatever W is, and a member's death is seen one hop (one relay period) later
than a direct worker's: the driver allows relayed members ``timeout + hop``.

Workers on different communicators (a replacement's own pair, a kept view) always beat
directly: only ranks of one communicator can reach each other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

DEFAULT_MAX_DIRECT = 16


class Role(NamedTuple):
    """Driver -> worker, on the heartbeat channel: whom to beat to. ``relay`` is the rank of
    this worker's relay (None: beat to the driver); ``members`` are (worker, rank) pairs this
    worker relays for (empty unless it is a relay)."""

    relay: int | None
    members: tuple[tuple[int, int], ...]


DIRECT = Role(None, ())


class RelayBack(NamedTuple):
    """Relay -> member: the relay is alive, and last heard the driver ``driver_age`` s ago."""

    driver_age: float


class Relayed(NamedTuple):
    """One member's line in a relay's beat: ``age`` s since the relay last heard it, or the
    ``cause`` of its failure when the relay's MPI reported one (ULFM)."""

    worker: int
    age: float
    progress: int
    busy: bool
    cause: str = ""


def plan(workers: Iterable[int], max_direct: int) -> dict[int, int | None]:
    """worker -> the worker it beats to (None: the driver; every relay maps to None)."""
    ws = sorted(workers)
    if max_direct <= 0 or len(ws) <= max_direct:
        return {w: None for w in ws}
    size = -(-len(ws) // max_direct)  # ceil: at most max_direct groups
    out: dict[int, int | None] = {}
    for i in range(0, len(ws), size):
        group = ws[i : i + size]
        out[group[0]] = None
        out.update((m, group[0]) for m in group[1:])
    return out


def roles(relay_of: Mapping[int, int | None], rank: Mapping[int, int]) -> dict[int, Role]:
    """Each worker's :class:`Role` from a :func:`plan`, with ranks on the shared communicator."""
    members: dict[int, list[tuple[int, int]]] = {}
    for w, r in relay_of.items():
        if r is not None:
            members.setdefault(r, []).append((w, rank[w]))
    return {
        w: Role(None if r is None else rank[r], tuple(members.get(w, ())))
        for w, r in relay_of.items()
    }


class MemberBook:
    """A relay's record of its members: when each was last heard, and what it said."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.members: dict[int, int] = {}  # rank -> worker
        self._seen: dict[int, tuple[float, int, bool]] = {}  # rank -> (when, progress, busy)
        self._failed: dict[int, str] = {}

    def assign(self, members: Iterable[tuple[int, int]]) -> None:
        """Relay for ``members`` from now; a member kept from before keeps its record."""
        now = self.clock()
        new = {rank: w for w, rank in members}
        keep = {r for r, w in new.items() if self.members.get(r) == w and r in self._seen}
        self._seen = {r: self._seen[r] if r in keep else (now, 0, False) for r in new}
        self._failed = {r: c for r, c in self._failed.items() if r in keep}
        self.members = new

    def heard(self, rank: int, progress: int, busy: bool) -> None:
        if rank in self.members:
            self._seen[rank] = (self.clock(), progress, busy)

    def failed(self, rank: int, cause: str) -> None:
        if rank in self.members:
            self._failed.setdefault(rank, cause)

    def report(self) -> tuple[Relayed, ...]:
        now = self.clock()
        return tuple(
            Relayed(self.members[r], now - t, p, b, self._failed.get(r, ""))
            for r, (t, p, b) in sorted(self._seen.items())
        )


def named_silent(
    overdue: Iterable[int], via: Mapping[int, int], suspects: Iterable[int]
) -> list[int]:
    """The overdue workers to name failed now: not a member whose relay is overdue or
    suspect itself (the relay's silence is the member's; the member gets a new role and a
    fresh deadline once the relay is failed), and not one named already."""
    late = set(overdue)
    named = set(suspects)
    return [w for w in sorted(late) if w not in named and via.get(w) not in late | named]
