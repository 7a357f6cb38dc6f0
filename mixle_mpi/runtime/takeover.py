"""A worker's part in driver failover (policy/failover_plan.py): after the driver died, agree on
the survivors, then serve the new driver or become it.

Under ULFM the job's communicator is revoked, so a survivor still computing hears of the
death at its next message, and shrunk. Without ULFM the survivors agree by messages
(:func:`by_messages`, deciding with :class:`~mixle_mpi.policy.failover_plan.Election`) and build
a communicator over exactly the named ones (MPICH), or a view of the job's own over them
where none can be built (Open MPI under srun: runtime/keptcomm.py). Either way every survivor leaves with the same
communicator, within ``reconfigure_timeout``; its rank 0 drives from then on and the others
start again as its workers (the startup handshake, then Setup and shard loads).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from mpi4py import MPI

from mixle_mpi.core.deadlines import run_with_deadline
from mixle_mpi.core.protocol import TAG_ELECT, Elect, Survivors
from mixle_mpi.policy.failover_plan import BY_KEEPING, Election, agrees_by_messages
from mixle_mpi.runtime.keptcomm import KeptComm
from mixle_mpi.runtime.transport import Backoff


class NoAgreement(Exception):
    """The survivors could not agree on a successor (no majority, or no coordinator named them)."""


@dataclass
class Takeover:
    """What the successor brings to its new role: the survivors' communicator (it is rank
    0), the job's pickled encoder, and what happened."""

    comm: Any
    encoder: bytes | None
    previous: int  # this process's worker id under the dead driver
    driver: tuple  # (host, pid) of the dead driver
    why: str  # how the death was seen
    lost_at: float  # time.time() when this process saw it
    agreed_seconds: (
        float  # revoke and shrink, or the election and the communicator built over its survivors
    )
    survivors: int  # ranks in ``comm``, this one included


def by_shrink(comm, timeout: float):
    """ULFM: revoke ``comm`` and shrink it over the live ranks."""
    try:
        comm.Revoke()
    except MPI.Exception:
        pass  # revoked already by another survivor, or it has failed members: shrink anyway
    return run_with_deadline(comm.Shrink, timeout, "shrinking over the survivors of the driver")


def announce(comm) -> None:
    """Tell every other worker of ``comm`` that the driver is dead and this rank lives. The
    sends are not waited for: one to a dead rank may never complete (MPICH)."""
    me = comm.Get_rank()
    for rank in range(1, comm.Get_size()):
        if rank != me:
            try:
                comm.isend(Elect(me), dest=rank, tag=TAG_ELECT)
            except MPI.Exception:
                pass


def _sources(comm):
    """The ranks an election message may come from: every worker of ``comm`` but this one."""
    me = comm.Get_rank()
    return [rank for rank in range(1, comm.Get_size()) if rank != me]


def _elect_waiting(comm, probe, failed: set):
    """(what ``probe(source, status)`` found, its sender) for a waiting election message, or
    None. A wildcard probe first; under ULFM it fails while a death is unacknowledged, and
    then each worker is asked (those it reports failed are added to ``failed``, asked no more)."""
    status = MPI.Status()
    try:
        found = probe(MPI.ANY_SOURCE, status)
        return (found, status.Get_source()) if found else None
    except MPI.Exception:
        pass
    for rank in _sources(comm):
        if rank in failed:
            continue
        try:
            found = probe(rank, None)
        except MPI.Exception:
            failed.add(rank)
            continue
        if found:
            return found, rank
    return None


def peer_says_driver_dead(comm) -> bool:
    """A survivor's Elect is waiting (it is left for :func:`by_messages` to read)."""
    return (
        _elect_waiting(comm, lambda source, _: comm.iprobe(source=source, tag=TAG_ELECT), set())
        is not None
    )


def _next_elect(comm, failed: set):
    """(message, sender) of a waiting election message, or None."""
    return _elect_waiting(
        comm,
        lambda source, status: comm.improbe(source=source, tag=TAG_ELECT, status=status),
        failed,
    )


def by_messages(comm, window: float, timeout: float, announced: bool, keep: bool = False):
    """Without ULFM: hear which workers live, let the lowest of a majority name them, and
    build a communicator over exactly those, or (``keep``) a view of ``comm`` over them
    (runtime/keptcomm.py). Raises NoAgreement, TimeoutError or MPI.Exception."""
    me = comm.Get_rank()
    election = Election(me, frozenset(range(1, comm.Get_size())), time.monotonic(), window)
    if not announced:
        announce(comm)
    named, deadline, backoff = None, election.started + window + timeout, Backoff()
    failed: set = set()
    while named is None:
        got = _next_elect(comm, failed)
        if got is not None:
            obj, sender = got[0].recv(), got[1]
            if isinstance(obj, Elect):
                election.hear(obj.rank)
            elif isinstance(obj, Survivors) and election.accepts(sender, obj.ranks):
                named = obj
            continue
        decision = election.decide(time.monotonic())
        if decision is not None and decision[0] == "give_up":
            raise NoAgreement(decision[1])
        if decision is not None and decision[0] == "lead":
            named = Survivors(decision[1], f"mixle_mpi.failover.{os.getpid()}.{time.time_ns()}")
            for rank in named.ranks:
                if rank != me:
                    comm.isend(named, dest=rank, tag=TAG_ELECT)
            break
        if time.monotonic() > deadline:
            raise NoAgreement(f"no coordinator named the survivors within {window + timeout:g} s")
        backoff.sleep()
    if keep:
        return KeptComm.over(comm, named.ranks)
    group = comm.Get_group().Incl(list(named.ranks))
    try:
        return run_with_deadline(
            lambda: MPI.Intracomm.Create_from_group(group, stringtag=named.tag),
            timeout,
            "the survivors' communicator",
        )
    finally:
        group.Free()


def driver_in(old, new) -> bool:
    """Whether rank 0 of ``old`` (its driver) is a member of ``new``."""
    return MPI.Group.Translate_ranks(old.Get_group(), [0], new.Get_group())[0] != MPI.UNDEFINED


def agree(
    comm,
    how: str,
    window: float,
    timeout: float,
    announced: bool,
    previous: int,
    driver: tuple,
    encoder: bytes | None,
    why: str,
) -> Takeover:
    """The survivors' communicator, agreed ``how`` (policy.failover_plan), and this process's view."""
    lost_at, t0 = time.time(), time.monotonic()
    new = (
        by_messages(comm, window, timeout, announced, keep=how == BY_KEEPING)
        if agrees_by_messages(how)
        else by_shrink(comm, timeout)
    )
    return Takeover(
        new, encoder, previous, driver, why, lost_at, time.monotonic() - t0, new.Get_size()
    )
