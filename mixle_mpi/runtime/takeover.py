"""A worker's part in driver failover (policy/failover.py): after the driver died, agree on
the survivors, then serve the new driver or become it.

The old communicator is revoked, so a survivor still computing hears of the death at its
next message, and shrunk under ULFM within ``reconfigure_timeout``. Every survivor leaves
with the same communicator; its rank 0 drives from then on and the others start again as
workers of that communicator (the startup handshake, then Setup and shard loads).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from mpi4py import MPI

from mixle_mpi.core.deadlines import run_with_deadline


@dataclass
class Takeover:
    """What the successor brings to its new role: the survivors' communicator (it is rank
    0), the job's pickled encoder, and what happened."""

    comm: Any
    encoder: bytes | None
    previous: int          # this process's worker id under the dead driver
    driver: tuple          # (host, pid) of the dead driver
    why: str               # how the death was seen
    lost_at: float         # time.time() when this process saw it
    agreed_seconds: float  # revoke and shrink
    survivors: int         # ranks in ``comm``, this one included


def survivors_comm(comm, timeout: float):
    """Revoke ``comm`` and shrink it over the live ranks; raises TimeoutError or MPI.Exception."""
    try:
        comm.Revoke()
    except MPI.Exception:
        pass  # revoked already by another survivor, or it has failed members: shrink anyway
    return run_with_deadline(comm.Shrink, timeout, "shrinking over the survivors of the driver")


def driver_in(old, new) -> bool:
    """Whether rank 0 of ``old`` (its driver) is a member of ``new``."""
    return MPI.Group.Translate_ranks(old.Get_group(), [0], new.Get_group())[0] != MPI.UNDEFINED


def agree(comm, timeout: float, previous: int, driver: tuple, encoder: bytes | None, why: str) -> Takeover:
    """The survivors' communicator and this process's view of the takeover."""
    lost_at, t0 = time.time(), time.monotonic()
    new = survivors_comm(comm, timeout)
    return Takeover(new, encoder, previous, driver, why, lost_at, time.monotonic() - t0, new.Get_size())
