"""Bounding a blocking call that has no timeout of its own (an MPI collective, Spawn,
Disconnect, Finalize): it runs in a helper thread and the caller stops waiting at a deadline.
"""

from __future__ import annotations

import threading
import time

from mixle_mpi.core import liveness

MARK_EVERY = 1.0  # seconds: a caller waiting on a call marks its own liveness this often
GIVE_UP_POLL = (
    0.02  # seconds between the caller's looks at whether the call can still end (birth.SCAN_EVERY)
)


class GaveUp(TimeoutError):
    """The caller stopped waiting before the deadline: it learnt the call can never end."""


class Background:
    """A blocking call running in a helper thread, which the caller polls (``done``) instead
    of waiting for it: a Spawn that must not hold up the fit."""

    def __init__(self, fn, what: str) -> None:
        self.box: dict = {}

        def target() -> None:
            try:
                self.box["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                self.box["error"] = exc

        self.thread = threading.Thread(target=target, daemon=True, name=f"mixle-mpi-{what}")
        self.thread.start()

    def done(self) -> bool:
        return not self.thread.is_alive()

    def result(self):
        """The call's value, or its exception raised here (call once ``done``)."""
        if "error" in self.box:
            raise self.box["error"]
        return self.box["value"]


def run_with_deadline(fn, timeout: float, what: str, give_up=None):
    """Run a blocking MPI call in a helper thread; raise TimeoutError past the deadline.

    A collective that never returns (a member died inside it on a library without ULFM)
    must become a clear error, not a hung job. The stuck thread is abandoned; the caller
    ends the process. ``give_up()``, if given, is asked while waiting: a reason (text) ends
    the wait at once with ``GaveUp`` (a Spawn whose process died).
    """
    call = Background(fn, what)
    end = time.monotonic() + timeout
    while not call.done():
        left = end - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{what} did not finish within {timeout:g} s")
        liveness.mark()  # waiting here, with a deadline, is progress (core/liveness)
        if give_up is None:
            call.thread.join(min(left, MARK_EVERY))
            continue
        reason = give_up()
        if reason:
            raise GaveUp(f"{what} given up: {reason}")
        call.thread.join(min(left, GIVE_UP_POLL))
    return call.result()
