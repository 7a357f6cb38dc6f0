"""Driver failover (pure): whether a job goes on when its driver dies, and who drives next.

The workers of a job with failover on do not end when the driver dies: they agree on the
survivors, and the lowest surviving rank becomes the driver, reopens the shard store and
resumes the fit from its checkpoint (every rank runs the same command, so the successor
knows the whole job). A resumed fit replays the lost iterations to the same bits.

How the survivors agree depends on the MPI library:

- under ULFM they revoke and shrink the communicator: ``Shrink`` agrees by itself;
- elsewhere by messages (:class:`Election`): each survivor tells every other that it
  lives, the lowest one it hears of coordinates once everyone answered or ``window`` passed,
  and it needs a majority of the workers, so that two disjoint groups can never both go on
  (there are never two drivers). The coordinator names the survivors; they build a
  communicator over exactly those (MPICH: ``Create_from_group``), or, where no new
  communicator can be built (Open MPI under srun: the ``keep`` way), go on over the job's
  own communicator and address only each other (``BY_KEEPING``).

Only a driver known dead takes a successor: an MPI error from ULFM, its process gone on a
worker's host, or a survivor's word that it saw one of these. A silent driver may still be
alive (stopped, or cut off): a second driver could then write beside it, so silence ends the
worker as before (``driver_timeout``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mixle_mpi.policy.reconfig_plan import EMULATED, KEEP, ULFM

OFF, BY_SHRINK, BY_MESSAGES, BY_KEEPING = "", "ulfm", "messages", "messages-keep"


def failover_status(requested: bool, method: str) -> tuple[str, str]:
    """(how the survivors agree, or OFF; why), from what was asked and how the job continues
    after a worker failure (policy.reconfig_plan): the same way, with the driver's death."""
    if not requested:
        return OFF, "off"
    on = (
        "on: once the fit writes a checkpoint, if the driver dies the lowest surviving rank takes over and "
        "resumes from it"
    )
    if method == ULFM:
        return BY_SHRINK, f"{on} (survivors agreed by ULFM's Shrink)"
    host = "; a worker must share the driver's host to see its death at once"
    if method == EMULATED:
        return BY_MESSAGES, f"{on} (survivors agreed by messages{host})"
    if method == KEEP:
        return BY_KEEPING, (
            f"{on} (survivors agreed by messages, over the job's own communicator: the dead driver is "
            f"never addressed again{host})"
        )
    return (
        OFF,
        f"off: no way to agree without the driver under {method!r}; rerun a dead driver's job to resume",
    )


def agrees_by_messages(how: str) -> bool:
    """Whether survivors agree by messages (announce the death, elect), not by ULFM."""
    return how in (BY_MESSAGES, BY_KEEPING)


def can_take_over(path: str, readable: bool, what: str = "the shard store") -> str:
    """Why a worker cannot take over ("" if it can): a successor reopens the shard store and
    the checkpoint, so one that cannot read them (no shared file system) drops out of
    failover, and the others agree without it when the driver dies."""
    if path and not readable:
        return f"cannot read {what} {path} (put it on a file system every rank reads)"
    return ""


def successor(survivors) -> int:
    """The rank that drives next: the lowest survivor (rank 0 of the communicator built over
    the survivors, which keeps their order, so every survivor reaches the same answer)."""
    survivors = sorted(survivors)
    if not survivors:
        raise ValueError("no survivor to take over")
    return survivors[0]


def takes_over_on(cause: str) -> bool:
    """Whether a way of losing the driver lets a successor take over: "failed" (an MPI error
    under ULFM), "gone" (its process ended on this host) and "told" (a survivor saw one of
    these) do; "silent" does not."""
    if cause not in ("failed", "gone", "told", "silent"):
        raise ValueError(f"unknown way of losing the driver: {cause!r}")
    return cause != "silent"


def election_window(heartbeat_period: float) -> float:
    """How long a survivor waits for the others to say they live (agreement by messages): a
    worker sees the death itself within a few silent beats, or hears a survivor's word at
    its next beat; six periods, and at least a second, cover both with room to spare."""
    return max(1.0, 6.0 * heartbeat_period)


@dataclass
class Election:
    """One survivor's view of the agreement by messages. ``members``: the worker ranks of the
    job's communicator (the dead driver, rank 0, is not one); ``window``: how long to wait
    for the others to say they live."""

    me: int
    members: frozenset
    started: float
    window: float
    heard: set = field(default_factory=set)

    def hear(self, rank: int) -> None:
        if rank in self.members:
            self.heard.add(rank)

    def alive(self) -> frozenset:
        return frozenset(self.heard | {self.me})

    def coordinator(self) -> int:
        return successor(self.alive())

    def complete(self, now: float) -> bool:
        """Everyone answered, or the window has passed."""
        return self.alive() >= self.members or now >= self.started + self.window

    def has_quorum(self, ranks) -> bool:
        """A majority of the workers: two disjoint groups cannot both have one."""
        return 2 * len(set(ranks) & self.members) > len(self.members)

    def decide(self, now: float) -> tuple | None:
        """What this survivor does now: None (keep listening), ("lead", ranks) (name them
        the survivors), ("follow", rank) (wait for that rank to name them), or ("give_up",
        why) when the ranks it heard of are no majority."""
        if not self.complete(now):
            return None
        alive = self.alive()
        if not self.has_quorum(alive):
            return (
                "give_up",
                f"only {len(alive)} of {len(self.members)} workers answered: no majority, so "
                "no driver may take over (another group might)",
            )
        if self.coordinator() == self.me:
            return ("lead", tuple(sorted(alive)))
        return ("follow", self.coordinator())

    def accepts(self, sender: int, ranks) -> bool:
        """Whether to build the communicator a coordinator named: it includes this rank, is a
        majority, and comes from its lowest member, no higher than any rank this one heard."""
        ranks = tuple(ranks)
        return (
            self.me in ranks
            and self.has_quorum(ranks)
            and sender == successor(ranks)
            and sender <= self.coordinator()
        )
