"""A monotonic clock a test moves by hand, for the pure deadline logic (no sleeping)."""

from __future__ import annotations


class FakeClock:
    """Values chosen by the tests are exact in binary, so deadlines compare exactly."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, dt: float) -> None:
        self.now += dt
