"""Worker membership and the failure policy, as plain data.

A worker id is a stable logical place (its original world rank). A process that holds it
may die and be replaced (a new *incarnation*); a place that fails ``max_retries`` times is
blacklisted for the rest of the job and its shards move for good.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

LIVE, DEAD, BLACKLISTED = "live", "dead", "blacklisted"


@dataclass
class WorkerRecord:
    worker: int
    state: str = LIVE
    failures: int = 0
    incarnation: int = 0
    pid: int | None = None
    host: str | None = None


@dataclass
class FailureDecision:
    """What to do with the places that just failed."""

    respawn: list[int] = field(default_factory=list)
    blacklist: list[int] = field(default_factory=list)


class Membership:
    """Which worker places exist, which are live, and how often each has failed."""

    def __init__(self, workers, max_retries: int) -> None:
        self.max_retries = int(max_retries)
        self.records = {int(w): WorkerRecord(int(w)) for w in workers}

    def live(self) -> list[int]:
        return sorted(w for w, r in self.records.items() if r.state == LIVE)

    def blacklisted(self) -> list[int]:
        return sorted(w for w, r in self.records.items() if r.state == BLACKLISTED)

    def is_live(self, worker: int) -> bool:
        rec = self.records.get(worker)
        return rec is not None and rec.state == LIVE

    def mark_failed(self, worker: int) -> bool:
        """Record one failure of a live place; False if it was not live (a duplicate report)."""
        rec = self.records[worker]
        if rec.state != LIVE:
            return False
        rec.state = DEAD
        rec.failures += 1
        return True

    def decide(self, failed, can_respawn: bool) -> FailureDecision:
        """Respawn places below ``max_retries`` (when spawning works); blacklist the rest."""
        decision = FailureDecision()
        for w in sorted(failed):
            rec = self.records[w]
            if rec.state != DEAD:
                continue
            if can_respawn and rec.failures < self.max_retries:
                decision.respawn.append(w)
            else:
                decision.blacklist.append(w)
        return decision

    def fencer(
        self,
        host: str | None,
        exclude: int,
        space: str = "",
        spaces: Mapping[int, str] | None = None,
    ) -> int | None:
        """Who kills a failed worker's process in another pid space than the driver's: the
        lowest live worker in its pid space ``space`` (``spaces``: each worker's), since a
        pid means something only there (two containers may share a host name). Where the
        failed worker's space is unknown, the lowest live worker on its ``host``."""
        if not space and not host:
            return None

        def beside(w: int) -> bool:
            return (spaces or {}).get(w) == space if space else self.records[w].host == host

        return next(
            (
                w
                for w in sorted(self.records)
                if w != exclude and self.records[w].state == LIVE and beside(w)
            ),
            None,
        )

    def blacklist(self, worker: int) -> None:
        self.records[worker].state = BLACKLISTED

    def revive(self, worker: int, pid: int | None = None, host: str | None = None) -> int:
        """A replacement process now holds the place; returns its incarnation number."""
        rec = self.records[worker]
        rec.state = LIVE
        rec.incarnation += 1
        rec.pid, rec.host = pid, host
        return rec.incarnation

    def retire(self, worker: int) -> None:
        """A spare's place ends because its process took another place (see reconfig_plan.Adopt)."""
        self.records.pop(worker, None)

    def failures(self) -> dict[int, int]:
        return {w: r.failures for w, r in sorted(self.records.items())}
