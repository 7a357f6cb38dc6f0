"""When a fit writes a checkpoint: early once, then by the clock, never at a cost above 2 %.

Checkpoints are on by default, so their cost must stay small on any fit. A write costs a
few milliseconds for small models and grows with the model, while an iteration takes from
a millisecond (Iris) to minutes. A checkpoint after every iteration, the old default, cost
the small fits far more than 2 % of their time, so the default cadence is:

- the first iteration of a fit: a preemption or a dead driver soon after the start loses
  only the start;
- then every ``seconds`` (default 60 s): what a dead driver or a killed job loses at most;
- but never sooner than ``last write time / MAX_SHARE`` after the last write, so writes
  take at most ``MAX_SHARE`` of the wall time even for a model whose checkpoint is large;
``every`` N iterations adds writes to this default and keeps its protections (users who ask
for more checkpoints do not expect to lose the early one and the clock). A clock given
explicitly (``seconds``) is kept exactly as given: no early first checkpoint and no cap (the
user's choice). The fit also writes one at the end and one when it is preempted, whatever
the cadence.
Pure but for the clock, which the caller may inject.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

DEFAULT_SECONDS = 60.0
CHECKPOINT_NAME = "checkpoint.h5"
MAX_SHARE = 0.02  # the most of the wall time the timed checkpoints may take


@dataclass
class Cadence:
    every: int | None = None  # every N-th iteration (None: not by count)
    seconds: float | None = None  # every this many seconds (None: not by the clock)
    clock: Callable[[], float] = time.monotonic
    written: bool = False  # a checkpoint of this fit exists (resumed, or written)
    last: float = field(default=0.0)  # when the last one was written (or the segment began)
    cost: float = 0.0  # how long the last write took, seconds
    default: bool = field(init=False)  # no clock given: the default clock, first write and cap

    def __post_init__(self) -> None:
        self.last = self.clock()
        self.default = self.seconds is None
        if self.default:
            self.seconds = DEFAULT_SECONDS

    def due(self, iteration: int) -> bool:
        """Whether the checkpoint after ``iteration`` (counted from 1) is due."""
        if self.default and not self.written:
            return True
        if self.every and iteration % self.every == 0:
            return True
        if self.seconds is None:
            return False
        floor = self.cost / MAX_SHARE if self.default else 0.0
        return self.clock() - self.last >= max(self.seconds, floor)

    def wrote(self, seconds_taken: float) -> None:
        self.written, self.last, self.cost = True, self.clock(), seconds_taken
