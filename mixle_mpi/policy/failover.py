"""Driver failover (pure): whether a job goes on when its driver dies, and who drives next.

The workers of a job with failover on do not end when the driver dies: they shrink their
communicator over the survivors, and its new rank 0, the lowest surviving rank, becomes
the driver, reopens the shard store and resumes the fit from its checkpoint (every rank
runs the same command, so the successor knows the whole job). A resumed fit replays the
lost iterations to the same bits, so the outcome is that of a failure-free run.

Only a driver known dead takes a successor: an MPI error from ULFM, or its process gone
on this host. A silent driver may still be alive (stopped, or cut off): a second driver
could then write beside it, so silence ends the worker as before (``driver_timeout``).
"""

from __future__ import annotations

from mixle_mpi.policy.reconfig import ULFM

# How each way of continuing supports a successor. Only ULFM's Shrink agrees on the
# survivors without the driver; the emulation and KEEP need the driver to say who lives.
NOT_WITHOUT_ULFM = ("needs ULFM (Open MPI started with --with-ft ulfm, as `mixle-mpi run` does): "
                    "without it no survivor can agree on the others without the driver")


def failover_status(requested: bool, method: str) -> tuple[bool, str]:
    """(on, why): failover runs when it was asked for and the job continues by ULFM."""
    if not requested:
        return False, "off"
    if method != ULFM:
        return False, f"off: {NOT_WITHOUT_ULFM}; a dead driver ends the job; rerun it to resume"
    return True, "on: if the driver dies, the lowest surviving rank takes over and resumes from the checkpoint"


def successor(survivors) -> int:
    """The rank that drives next: the lowest survivor (rank 0 of the shrunken communicator,
    which keeps the ranks' order, so every survivor reaches the same answer alone)."""
    survivors = sorted(survivors)
    if not survivors:
        raise ValueError("no survivor to take over")
    return survivors[0]


def takes_over_on(cause: str) -> bool:
    """Whether a way of losing the driver lets a successor take over: "failed" (an MPI error
    under ULFM) and "gone" (its process ended on this host) do; "silent" does not."""
    if cause not in ("failed", "gone", "silent"):
        raise ValueError(f"unknown way of losing the driver: {cause!r}")
    return cause != "silent"
