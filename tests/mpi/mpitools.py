"""Bounded waits for the in-MPI tier: every wait here ends at a deadline with a clear error."""

from __future__ import annotations

import time

from mixle_mpi.runtime.transport import Backoff, Link, PeerFailed

WAIT = 30.0  # seconds any single wait of a test may take before it fails


class Ended(BaseException):
    """Raised instead of ending the process (see the ``no_exit`` fixture).

    A BaseException, so a worker loop's ``except Exception`` does not swallow it."""

    def __init__(self, code: int) -> None:
        super().__init__(f"the process would have exited with code {code}")
        self.code = code


class DeadlineLink(Link):
    """A Link whose ``poll`` reports the peer lost once ``deadline`` (monotonic) has passed.

    A real worker loop waits for the driver with no deadline of its own (the heartbeat
    thread's ``driver_timeout`` ends it in production); through this link it ends as
    "driver lost" instead, so a test whose driver went wrong cannot hang its workers."""

    def __init__(self, comm, hb, peer: int, seconds: float = WAIT) -> None:
        super().__init__(comm, hb, peer)
        self.deadline = time.monotonic() + seconds

    def poll(self, tag, comm=None):
        if time.monotonic() > self.deadline:
            raise PeerFailed(-1, "the test's deadline passed")
        return super().poll(tag, comm)


def wait_until(
    predicate, what: str, timeout: float = WAIT, low: float = 0.0005, high: float = 0.01
):
    """Poll ``predicate`` until it returns something truthy (returned); AssertionError at the deadline."""
    deadline = time.monotonic() + timeout
    backoff = Backoff(low, high)
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        backoff.sleep()


def recv(link: Link, tag: int, comm=None, timeout: float = WAIT, what: str = "a message"):
    """The next message from ``link``'s peer with ``tag`` (on ``comm``, default the data comm)."""
    box = []

    def got() -> bool:
        msg = link.poll(tag, comm)
        if msg is not None:
            box.append(msg)
        return bool(box)

    wait_until(got, f"{what} from rank {link.peer} (tag {tag})", timeout)
    return box[0]


def barrier(comm, timeout: float = WAIT) -> None:
    """A barrier that fails instead of hanging when a rank does not come."""
    req = comm.Ibarrier()
    wait_until(req.Test, "every rank at the barrier", timeout)
