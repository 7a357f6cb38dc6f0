"""How long a waiting rank sleeps before its next poll: briefly while a message is due, longer
otherwise.

Blocking MPI waits spin a core (Open MPI and MPICH both), and a spinning rank steals the CPU
the workers need on an oversubscribed node, so every wait is a poll with a sleep. A fixed
1 ms sleep adds up to 1 ms of latency to each message a round waits for, on both ends of a
round trip, which is most of the fixed cost of a short round; a fixed short sleep wastes CPU
for the whole of a long one. So a waiting rank polls finely only in the window where it
expects a message (:func:`round_window`, :func:`next_task_window`) and backs off outside it.
Where every message waited for comes with a ring of the waiter's doorbell
(``runtime/doorbell.py``), the ring ends the sleep: the waiter need not poll finely at all,
and sleeps up to ``BELL_CAP`` between polls (what a lost ring, or a failure MPI reports,
may wait). Pure: the caller supplies the clock and does the sleeping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

LOW = 0.0001  # s: first sleep after progress
FINE = 0.0002  # s: longest sleep while a message is due
HIGH = 0.001  # s: longest sleep otherwise (the latency a poll may add outside the window)
BELL_CAP = 0.005  # s: longest sleep while a ring announces each message waited for

NEVER = (math.inf, math.inf)

# A round's replies are due from this share of the last round's time on, until this multiple
# of it (plus a margin for noise); the first round of a kind has no history: fine throughout
# its first FIRST_ROUND_WINDOW seconds.
DUE_FROM, DUE_UNTIL, DUE_MARGIN = 0.5, 2.0, 0.005
FIRST_ROUND_WINDOW = 0.05
# A worker's next task follows its reply by the driver's fold and M-step (milliseconds).
NEXT_TASK_WINDOW = 0.05
# A poll pass of the driver costs O(W) (it drains every worker a round waits for): it sleeps
# at least this many times the last pass's time, so polling takes at most 1/(1 + this) of a
# core however many workers there are (at W = 2 a pass costs far less than FINE).
PASS_SLEEP_FACTOR = 4.0


def due_window(since: float, last_seconds: float | None, first: float) -> tuple[float, float]:
    """When a message is due, ``since`` the moment it became possible, given how long the
    last such wait took (None: no history yet, so fine polling for the ``first`` seconds)."""
    if last_seconds is None:
        return since, since + first
    return since + DUE_FROM * last_seconds, since + DUE_UNTIL * last_seconds + DUE_MARGIN


def round_window(started: float, last_seconds: float | None) -> tuple[float, float]:
    """When the driver expects a round's replies, given how long the last such round took."""
    return due_window(started, last_seconds, FIRST_ROUND_WINDOW)


def next_task_window(replied: float, last_gap: float | None = None) -> tuple[float, float]:
    """When a worker that just replied expects its next command, given how long it waited
    for one the last time (the driver's fold and M-step; longer where many workers share
    a few cores, and then the worker polls finely only near the end)."""
    return due_window(replied, last_gap, NEXT_TASK_WINDOW)


# What-ifs for a benchmark (bench/_job.py's --poll-cap and --no-poll-windows), set through
# :func:`what_if` before a fit: empty (the library's own pacing) in every fit otherwise.
WHAT_IF: dict = {}


def what_if(ceiling: float | None = None, windows: bool = True) -> None:
    """Diagnostics, for this process from now on: every wait backs off to ``ceiling`` seconds
    instead of ``HIGH`` (None: the library's own), and, without ``windows``, no wait knows
    when a message is due. Not a setting of the library: a benchmark asks what if."""
    WHAT_IF.clear()
    if ceiling is not None:
        WHAT_IF["ceiling"] = ceiling
    if not windows:
        WHAT_IF["windows"] = False


@dataclass
class Pacing:
    """Exponential backoff from ``low``, capped at ``fine`` inside the window and at ``high``
    outside it; a sleep never runs past the window's start. ``rung``: every message waited
    for is announced by a ring that ends the sleep (no window then; capped at ``BELL_CAP``)."""

    low: float = LOW
    high: float = HIGH
    fine: float = FINE
    window: tuple[float, float] = NEVER
    rung: bool = False
    delay: float = field(init=False)

    def __post_init__(self) -> None:
        if WHAT_IF:
            self.low, self.high = (
                min(self.low, WHAT_IF.get("ceiling", self.low)),
                WHAT_IF.get("ceiling", self.high),
            )
            self.window = self.window if WHAT_IF.get("windows", True) else NEVER
        self.fine = min(self.fine, self.high)
        self.delay = self.low

    def reset(self) -> None:
        """Progress was made: poll again soon."""
        self.delay = self.low

    def next_delay(self, now: float, pass_seconds: float = 0.0) -> float:
        """Seconds to sleep before the next poll; ``pass_seconds``, what the last poll pass
        took, bounds the share of a core that polling may take (``PASS_SLEEP_FACTOR``)."""
        start, end = self.window
        if self.rung:
            start, end = -math.inf, -math.inf
        inside = start <= now < end
        cap = max(self.high, BELL_CAP) if self.rung else self.fine if inside else self.high
        d = min(self.delay, cap)
        if now < start:
            d = max(self.low, min(d, start - now))
        # Rung, a ring ends the sleep: one short poll after progress (a message may be
        # matched one probe late), then the cap at once. Doubling from ``low`` would wake a
        # waiting rank six times per 10 ms for nothing, each time taking a core the
        # workers need on an oversubscribed node.
        self.delay = cap if self.rung else min(cap, self.delay * 2)
        return max(d, PASS_SLEEP_FACTOR * pass_seconds)
