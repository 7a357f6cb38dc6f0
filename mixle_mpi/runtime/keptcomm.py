"""A communicator over some ranks of another, made without any collective call: how the
survivors of a dead driver go on where no new communicator can be built (Open MPI under
srun, the ``keep`` way; policy/failover_plan.py, ``BY_KEEPING``).

The survivors are renumbered in their order, so the successor is rank 0 as after a Shrink,
and every view has its own band of tags on the job's communicator: a message of one view
never matches a receive of another, nor a message still in flight from before the takeover
(the job's own tags are below :data:`BAND`). It carries only what the job uses, which is
point-to-point messaging: a collective over a communicator with a dead member could hang.
"""

from __future__ import annotations

from mpi4py import MPI

BAND = 100  # tags per view: the protocol's tags are all below it
GENERATION = 100_000  # the bands of the views made after the k-th takeover start at k * GENERATION


class KeptComm:
    """Ranks ``ranks`` of ``base`` (a real communicator), renumbered 0.., with tags shifted
    by ``offset``. ``bands`` counts the views made so far in this generation: every member
    makes the same views in the same order (SPMD), so their bands agree without a message."""

    def __init__(self, base, ranks, generation: int, offset: int, bands: list) -> None:
        self.base = base
        self.ranks = tuple(ranks)
        self.generation, self.offset, self._bands = generation, offset, bands
        self._index = {real: i for i, real in enumerate(self.ranks)}
        me = base.Get_rank()
        if me not in self._index:
            raise ValueError(
                f"rank {me} is not one of the ranks {list(self.ranks)} it would talk to"
            )
        self._rank = self._index[me]
        if offset + BAND > base.Get_attr(MPI.TAG_UB):
            raise ValueError(f"no tags left for another view after {generation} takeovers")

    @classmethod
    def over(cls, comm, ranks) -> "KeptComm":
        """The survivors ``ranks`` of ``comm`` (a real communicator or a view): a new generation."""
        if isinstance(comm, KeptComm):
            base, real, generation = comm.base, [comm.ranks[r] for r in ranks], comm.generation + 1
        else:
            base, real, generation = comm, list(ranks), 1
        return cls(base, real, generation, generation * GENERATION, [0])

    def subset(self, members) -> "KeptComm":
        """Members ``members`` (ranks of this view) in a view of their own: the job's startup
        over the survivors (runtime.startup.build_comms)."""
        self._bands[0] += 1
        return KeptComm(
            self.base,
            [self.ranks[m] for m in members],
            self.generation,
            self.generation * GENERATION + self._bands[0] * BAND,
            self._bands,
        )

    def Dup(self) -> "KeptComm":
        return self.subset(range(len(self.ranks)))

    def Get_rank(self) -> int:
        return self._rank

    def Get_size(self) -> int:
        return len(self.ranks)

    def _tag(self, tag: int) -> int:
        if not 0 <= tag < BAND:
            raise ValueError(f"tag {tag} is outside a view's band (0..{BAND - 1}; no wildcard)")
        return self.offset + tag

    def _real(self, rank: int) -> int:
        return rank if rank == MPI.ANY_SOURCE else self.ranks[rank]

    def isend(self, obj, dest: int, tag: int = 0):
        return self.base.isend(obj, dest=self.ranks[dest], tag=self._tag(tag))

    def improbe(self, source: int = MPI.ANY_SOURCE, tag: int = 0, status=None):
        real = MPI.Status()
        while True:
            msg = self.base.improbe(source=self._real(source), tag=self._tag(tag), status=real)
            if msg is None:
                return None
            sender = self._index.get(real.Get_source())
            if sender is not None:
                if status is not None:
                    status.Set_source(sender)
                    status.Set_tag(tag)
                return msg
            msg.recv()  # not from a member: none sends in this band, but never let one in

    def iprobe(self, source: int = MPI.ANY_SOURCE, tag: int = 0) -> bool:
        return bool(self.base.iprobe(source=self._real(source), tag=self._tag(tag)))

    def Free(self) -> None:
        """Nothing to free: the view owns no MPI object."""
