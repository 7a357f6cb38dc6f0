"""Speculation: copies of a straggler's outstanding shards on idle workers (pure).

EM is bulk-synchronous: every round waits for its slowest worker, and on a shared cluster
the slowest is more often a slow node (a noisy neighbour, throttling, swapping) than a dead
one. A shard's result is the same bits whichever process computes it, and the fold takes
one result per shard in id order (policy/round_plan.py), so the first copy of a shard to reply
can win without changing anything downstream; later ones are dropped.

The rule follows Spark's speculation (a task is copied once it runs ``multiplier`` times
longer than the median, after a ``quantile`` of the tasks finished), adapted to a round:

- *when*: some live worker is idle while the round still waits: it has nothing of its own
  left. That is the point where the round would otherwise only wait (Spark's quantile);
  before it, a copy takes a core from a worker that has work of its own.
- *who*: a worker whose pace (seconds per shard) is more than ``MULTIPLIER`` times the
  typical pace, the median of the idle workers'. A pace is the median of a place's last
  ``WINDOW`` shards as the worker timed them (``Paces``): one shard delayed by the OS
  scheduler (four ranks on two cores) does not make a straggler, three slow ones in a row
  do, within the round they happen in. A worker that is slow between its shards (stopped
  and continued from outside) times its shards as quick, so this round's own pace counts
  too: seconds since its task went out over the shards it finished plus the one it is on,
  once it is ``MIN_LAG`` seconds behind where the typical pace would be (longer than the
  delays of a shared core). 1.5 is Spark's default; a
  false copy costs one shard's work and bytes, never bits (bench/results/stragglers.md).
- *what*: the tail of its queue (the shards it would reach last), as many as make both
  ends meet: the straggler's own remaining time against the idle workers' time for the
  copies, each copy costing what copies cost so far (its rows are sent and encoded: the
  median of the last copies' seconds, ``COPY_COST`` typical shards until one was timed).
  Only when that saves at least one typical shard's time and ``MIN_SAVING`` seconds: a
  smaller gain is lost to the messages and the store reads (Spark's minimum task time).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median

MULTIPLIER = 1.5  # a straggler's pace is more than this times the typical one (Spark's default)
COPY_COST = (
    1.25  # a copy's time on an idle worker, in typical shards: rows sent from the store and encoded
)
WINDOW = 5  # a pace is the median of this many last shards
MIN_LAG = 0.1  # seconds behind the typical pace before a round's own pace can make a straggler
MIN_SAVING = 0.02  # seconds a round must end sooner for copies to be made


@dataclass
class Paces:
    """Each worker place's seconds per shard, per kind of round: the median of its last
    ``window`` shards, robust to one shard the OS scheduler delayed. A new process at a
    place starts unknown."""

    window: int = WINDOW
    seconds: dict = field(default_factory=dict)  # (kind, worker) -> its last shards' seconds
    paces: dict = field(default_factory=dict)  # (kind, worker) -> their median
    copies: dict = field(
        default_factory=dict
    )  # kind -> the last speculative copies' seconds (rows encoded too)

    def note_copy(self, kind: str, seconds: float) -> None:
        self.copies.setdefault(kind, deque(maxlen=self.window)).append(max(0.0, float(seconds)))

    def copy_cost(self, kind: str) -> float | None:
        """What a copy took lately, its rows' encoding included; None before the first."""
        last = self.copies.get(kind)
        return median(last) if last else None

    def note(self, kind: str, worker: int, seconds: float) -> None:
        key = (kind, worker)
        last = self.seconds.setdefault(key, deque(maxlen=self.window))
        last.append(max(0.0, float(seconds)))
        self.paces[key] = median(last)

    def of(self, kind: str, worker: int) -> float | None:
        return self.paces.get((kind, worker))

    def forget(self, worker: int) -> None:
        """``worker``'s process changed (a replacement, an adoption): its pace is unknown."""
        for key in [k for k in self.seconds if k[1] == worker]:
            del self.seconds[key], self.paces[key]

    def typical(self, kind: str, workers: Iterable[int]) -> float | None:
        """The median pace of ``workers`` whose pace is known; None if none is."""
        known = [p for p in (self.paces.get((kind, w)) for w in workers) if p is not None]
        return median(known) if known else None


@dataclass(frozen=True)
class Busy:
    """A worker with shards of this round still to reply."""

    worker: int
    uncopied: tuple  # its shards with no copy yet, in the order it computes them
    left: int  # all its shards not replied yet, copied or not
    done: int  # its shards replied this round
    elapsed: float  # seconds since its task went out
    pace: float | None  # its seconds per shard from earlier shards (Paces), None if unknown

    @property
    def seen_pace(self) -> float:
        """Its pace for the time it still needs: its shards', or this round's if that is
        slower (the shard it is on counts as finishing now, so this only grows while it
        computes)."""
        return max(self.pace or 0.0, self.elapsed / (self.done + 1))

    def remaining(self, skipped: int = 0) -> float:
        """Seconds until it is through its shards, leaving out ``skipped`` more of them."""
        p = self.seen_pace
        todo = self.left - skipped
        if todo <= 0:
            return 0.0
        return max(p * (self.done + todo) - self.elapsed, p * (todo - 1))


@dataclass(frozen=True)
class Copies:
    """What to start: idle worker -> the shards it computes copies of (tail first), and for
    each straggler the time it would have needed without them (what a copy may save)."""

    plan: dict
    projected: dict  # straggler -> its remaining seconds when the copies were planned


def is_straggler(b: Busy, typical: float, multiplier: float = MULTIPLIER) -> bool:
    if b.left <= 0:
        return False
    if b.pace is not None and b.pace > multiplier * typical:
        return True
    behind = b.elapsed - (b.done + 1) * typical
    return behind >= MIN_LAG and b.elapsed / (b.done + 1) > multiplier * typical


def how_many(b: Busy, helpers: int, typical: float, copy: float | None = None) -> int:
    """How many of ``b``'s uncopied shards to copy onto ``helpers`` idle workers, each copy
    taking ``copy`` seconds (None: COPY_COST typical shards): the count that ends the round
    soonest (ties: fewer copies), 0 unless it saves a typical shard and MIN_SAVING."""
    if helpers <= 0 or not b.uncopied:
        return 0
    each = copy if copy is not None else COPY_COST * typical
    alone = b.remaining()
    best_k, best = 0, alone
    for k in range(1, len(b.uncopied) + 1):
        ends = max(b.remaining(k), math.ceil(k / helpers) * each)
        if ends < best:
            best_k, best = k, ends
    return best_k if alone - best >= max(typical, MIN_SAVING) else 0


def plan_copies(
    busy: Sequence[Busy],
    idle: Sequence[int],
    typical: float | None,
    multiplier: float = MULTIPLIER,
    copy: float | None = None,
) -> Copies:
    """Which idle worker copies which straggler's shards now (see the module's rule).
    Stragglers are served slowest first; each gets its share of the idle workers."""
    if not idle or not typical or typical <= 0:
        return Copies({}, {})
    slow = sorted(
        (b for b in busy if is_straggler(b, typical, multiplier)),
        key=lambda b: (-b.remaining(), b.worker),
    )
    plan: dict[int, list[int]] = {}
    projected: dict[int, float] = {}
    helpers = sorted(idle)
    for i, b in enumerate(slow[: len(helpers)]):
        mine = helpers[i :: min(len(slow), len(helpers))]
        k = how_many(b, len(mine), typical, copy)
        if not k:
            continue
        projected[b.worker] = b.remaining()
        tail = list(reversed(b.uncopied[-k:]))  # the last one first: the straggler reaches it last
        for j, shard in enumerate(tail):
            plan.setdefault(mine[j % len(mine)], []).append(shard)
    return Copies(plan, projected)


def busy_workers(
    outstanding: Mapping[int, Iterable[int]],
    copied: Iterable[int],
    done: Mapping[int, int],
    sent_at: Mapping[int, float],
    now: float,
    paces: Paces,
    kind: str,
) -> list[Busy]:
    """The round's busy workers as ``plan_copies`` reads them: ``outstanding`` maps each to
    its shards not replied yet (its own, in the order it computes them: by id)."""
    copied = set(copied)
    out = []
    for w, shards in sorted(outstanding.items()):
        ss = sorted(shards)
        if not ss or w not in sent_at:
            continue
        out.append(
            Busy(
                w,
                tuple(s for s in ss if s not in copied),
                len(ss),
                done.get(w, 0),
                max(0.0, now - sent_at[w]),
                paces.of(kind, w),
            )
        )
    return out


def slow_places(
    paces: Paces, kind: str, workers: Iterable[int], multiplier: float = MULTIPLIER
) -> dict[int, float]:
    """The workers whose pace is more than ``multiplier`` times the median of ``workers``,
    each with how many times slower (rounded to 0.1), for progress lines and ``status``."""
    workers = list(workers)
    mid = paces.typical(kind, workers)
    if not mid:
        return {}
    out = {}
    for w in sorted(workers):
        p = paces.of(kind, w)
        if p is not None and p > multiplier * mid:
            out[w] = round(p / mid, 1)
    return out
