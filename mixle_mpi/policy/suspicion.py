"""Suspicion is not death: a worker whose heartbeats stopped is suspected first, and fenced
only once something confirms it failed.

A runnable process that gets no CPU for a second is ordinary on a loaded node (OS jitter, a
page-in, a noisy neighbour, MPICH holding a rank inside the library while a peer dies), and
fencing it costs a recomputation, a respawn and a step towards its place's blacklist. So a
heartbeat silence of a worker on the driver's own host is checked against its process:

- gone (no such process, a zombie, or its pid names another process now): confirmed;
- stopped (SIGSTOP, a debugger): confirmed, as a hang;
- otherwise it is alive: one more timeout is allowed. If it beats again the suspicion is
  cleared. If it is still silent, it is kept waiting only while it is runnable or has used
  CPU since the last look (starved, or busy in the library), up to ``max_wait`` seconds
  from the first suspicion; a process that sleeps and uses no CPU while silent is hung.

A ULFM error or a stall is a verdict of its own and is never held back; a worker on another
host (no process to look at) keeps today's verdict: the heartbeat timeout. Real deaths are
found as fast as before: a killed or stopped process is confirmed at the first suspicion.
Plain data and a clock value in, a verdict out; the driver looks at the process and acts.
"""

from __future__ import annotations

from dataclasses import dataclass

GONE_STATES = frozenset({"Z", "X", "x"})
STOPPED_STATES = frozenset({"T", "t"})
RUNNABLE = "R"
HEARTBEAT = "heartbeat:"  # the cause prefix of a silence (runtime/monitor.py)


@dataclass(frozen=True)
class Look:
    """One look at a suspect's process: its state letter (None: it is gone, or its pid
    names another process now) and the CPU seconds it has used (None: unreadable)."""

    state: str | None
    cpu: float | None = None


@dataclass(frozen=True)
class Verdict:
    confirm: bool
    why: str  # said in the failure's cause, or in the suspicion's event


@dataclass
class Suspicion:
    since: float  # when it was first suspected (clock seconds)
    looked: float  # when it was last looked at
    cpu: float | None  # its CPU seconds then
    looks: int = 1


class Suspicions:
    """The workers suspected now, and the verdict on each new report of a silence."""

    def __init__(self, max_wait: float) -> None:
        self.max_wait = float(max_wait)
        self.open: dict[int, Suspicion] = {}

    def judge(self, worker: int, cause: str, look: Look | None, now: float) -> Verdict:
        """The verdict on ``worker`` reported failed for ``cause``; ``look`` is its process
        on this host (None: no process to look at here)."""
        prior = self.open.get(worker)
        verdict = _verdict(cause, look, prior, now, self.max_wait)
        if verdict.confirm:
            self.open.pop(worker, None)
        elif prior is None:
            self.open[worker] = Suspicion(now, now, look.cpu if look else None)
        else:
            prior.looked, prior.cpu, prior.looks = (
                now,
                (look.cpu if look else None),
                prior.looks + 1,
            )
        return verdict

    def cleared(self, heard_since) -> dict[int, Suspicion]:
        """The suspects heard again since their last look (``heard_since(worker, t)``), which
        are suspected no more."""
        out = {w: s for w, s in self.open.items() if heard_since(w, s.looked)}
        for w in out:
            del self.open[w]
        return out

    def forget(self, worker: int) -> None:
        self.open.pop(worker, None)


def _verdict(
    cause: str, look: Look | None, prior: Suspicion | None, now: float, max_wait: float
) -> Verdict:
    if not cause.startswith(HEARTBEAT) or look is None:
        return Verdict(True, "")
    if look.state is None or look.state in GONE_STATES:
        return Verdict(True, "; its process is gone")
    if look.state in STOPPED_STATES:
        return Verdict(True, "; its process is stopped (hung)")
    if prior is None:
        return Verdict(False, f"its process is alive (state {look.state}): one more timeout")
    waited = now - prior.since
    if waited >= max_wait:
        return Verdict(True, f"; still silent {waited:.1f} s after it was first suspected")
    used = look.cpu is not None and prior.cpu is not None and look.cpu > prior.cpu
    if look.state == RUNNABLE or used:
        why = "runnable" if look.state == RUNNABLE else "it used CPU"
        return Verdict(False, f"starved or busy ({why}, {waited:.1f} s so far): one more timeout")
    return Verdict(
        True, f"; its process sleeps and used no CPU for {now - prior.looked:.1f} s (hung)"
    )
