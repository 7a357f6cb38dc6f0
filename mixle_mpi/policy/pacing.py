"""How long a waiting rank sleeps before its next poll: briefly while a message is due, longer
otherwise.

Blocking MPI waits spin a core (Open MPI and MPICH both), and a spinning rank steals the CPU
the workers need on an oversubscribed node, so every wait is a poll with a sleep. A fixed
1 ms sleep adds up to 1 ms of latency to each message a round waits for, on both ends of a
round trip, which is most of the fixed cost of a short round; a fixed short sleep wastes CPU
for the whole of a long one. So a waiting rank polls finely only in the window where it
expects a message (:func:`round_window`, :func:`next_task_window`) and backs off outside it.
Pure: the caller supplies the clock and does the sleeping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

LOW = 0.0001     # s: first sleep after progress
FINE = 0.0002    # s: longest sleep while a message is due
HIGH = 0.001     # s: longest sleep otherwise (the latency a poll may add outside the window)

NEVER = (math.inf, math.inf)

# A round's replies are due from this share of the last round's time on, until this multiple
# of it (plus a margin for noise); the first round of a kind has no history: fine throughout
# its first FIRST_ROUND_WINDOW seconds.
DUE_FROM, DUE_UNTIL, DUE_MARGIN = 0.5, 2.0, 0.005
FIRST_ROUND_WINDOW = 0.05
# A worker's next task follows its reply by the driver's fold and M-step (milliseconds).
NEXT_TASK_WINDOW = 0.05


def round_window(started: float, last_seconds: float | None) -> tuple[float, float]:
    """When the driver expects a round's replies, given how long the last such round took."""
    if last_seconds is None:
        return started, started + FIRST_ROUND_WINDOW
    return started + DUE_FROM * last_seconds, started + DUE_UNTIL * last_seconds + DUE_MARGIN


def next_task_window(replied: float) -> tuple[float, float]:
    """When a worker that just replied expects its next command."""
    return replied, replied + NEXT_TASK_WINDOW


@dataclass
class Pacing:
    """Exponential backoff from ``low``, capped at ``fine`` inside the window and at ``high``
    outside it; a sleep never runs past the window's start."""

    low: float = LOW
    high: float = HIGH
    fine: float = FINE
    window: tuple[float, float] = NEVER
    delay: float = field(init=False)

    def __post_init__(self) -> None:
        self.fine = min(self.fine, self.high)
        self.delay = self.low

    def reset(self) -> None:
        """Progress was made: poll again soon."""
        self.delay = self.low

    def next_delay(self, now: float) -> float:
        """Seconds to sleep before the next poll."""
        start, end = self.window
        inside = start <= now < end
        cap = self.fine if inside else self.high
        d = min(self.delay, cap)
        if now < start:
            d = max(self.low, min(d, start - now))
        self.delay = min(cap, self.delay * 2) if inside else min(self.high, self.delay * 2)
        return d
