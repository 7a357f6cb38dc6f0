"""Which hosts the next launch leaves out after a lost host, and whether there is a next
launch at all (pure; unit-tested). The launcher probes the hosts and carries it out.

A host that does not answer a probe is left out, and counts once against the failure budget
(``--max-host-failures``): the job is launched again on the rest, from its checkpoint. S
does not depend on the number of workers, so fewer ranks give the same bits. A host left out
comes back after ``--host-cooldown`` seconds if it answers a probe then (Horovod Elastic's
blacklist with a cooldown); it costs no budget to come back, and losing it again costs one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mixle_mpi.core import exitcodes

DEFAULT_MAX_HOST_FAILURES = 2
DEFAULT_HOST_COOLDOWN = 600.0
FEWEST_RANKS = 2  # a driver and a worker
# Exits after which no host is probed: the job ended as it should, or as it was asked to,
# or its input was wrong (no host can mend that).
NOT_A_HOST = (
    exitcodes.OK,
    exitcodes.BAD_INPUT,
    exitcodes.CHECKPOINTED,
    exitcodes.PREEMPTED_UNSAVED,
    exitcodes.INTERRUPTED,
)


def worth_probing(code: int, timed_out: bool) -> bool:
    """Whether an attempt that ended with ``code`` may have lost a host (a launch past its
    ``--timeout`` is never launched again)."""
    return not timed_out and code not in NOT_A_HOST


def worth_looking_for_the_folder(code: int, timed_out: bool) -> bool:
    """Whether an attempt that ended with ``code`` may have met a host without the folder it
    was launched from: also after a bad input, as Open MPI's job ends then (that host's
    ranks never ran, and the driver found too few)."""
    return worth_probing(code, timed_out) or (not timed_out and code == exitcodes.BAD_INPUT)


@dataclass
class Loss:
    host: str
    at: float
    why: str


@dataclass
class Next:
    """What to do after an attempt: launch again (``ranks`` over every host but
    ``left_out``) or stop with ``message``."""

    relaunch: bool
    left_out: frozenset
    ranks: int
    lost_now: tuple[str, ...]
    message: str


@dataclass
class HostBook:
    """The hosts lost so far and the failure budget of one ``mixle-mpi run``."""

    max_failures: int = DEFAULT_MAX_HOST_FAILURES
    cooldown: float = DEFAULT_HOST_COOLDOWN
    fewest: int = (
        FEWEST_RANKS  # the least ranks the job runs on (a driver, a worker, its hot spares)
    )
    losses: list[Loss] = field(default_factory=list)
    out: dict = field(default_factory=dict)  # host -> when it was left out
    # hosts that were all silent at once, but one, at the last probe: not taken for lost
    # until a second probe finds them so again (``_all_but_one_silent``)
    doubted: frozenset = frozenset()

    def to_probe(self, names: list[str], now: float) -> list[str]:
        """The hosts to probe: every one in use, and those left out whose cooldown is over."""
        return [h for h in names if h not in self.out or now - self.out[h] >= self.cooldown]

    def _all_but_one_silent(self, answered: dict) -> str:
        """Why no host is left out this time, when every probed host but one is silent (two
        or more): right after a failed launch that says more about the network or the probe
        than about the hosts (seen under MPICH on a loaded machine). Only a second probe
        that finds the same hosts silent takes them for lost."""
        silent = frozenset(h for h, ok in answered.items() if ok is False)
        if len(silent) < 2 or len(silent) != len(answered) - 1 or silent == self.doubted:
            self.doubted = frozenset()
            return ""
        self.doubted = silent
        return (
            f"every host probed but one was silent at once ({', '.join(sorted(silent))}): that "
            "points at the network or the probe rather than at the hosts, so none is left out "
            "now; a second probe that finds them silent again leaves them out"
        )

    def decide(
        self, names: list[str], slots: dict, answered: dict, ranks: int, now: float, why: str
    ) -> Next:
        """After a failed attempt whose hosts answered a probe as ``answered`` (host -> bool;
        a host not probed is one still cooling down): which hosts the next launch leaves
        out, on how many ranks (at most ``ranks``), or why there is none. No host newly
        lost: ``relaunch`` False with an empty message (the launcher's other rules apply)."""
        if answered and not any(answered.values()):  # the probe itself fails: it cannot tell
            return Next(
                False,
                frozenset(self.out),
                min(ranks, sum(n for h, n in slots.items() if h not in self.out)),
                (),
                "no host answered a probe, so none is left out (is the launcher itself at fault?)",
            )
        doubt = self._all_but_one_silent(answered)
        if doubt:
            return Next(False, frozenset(self.out), min(ranks, sum(slots.values())), (), doubt)
        lost_now = tuple(h for h in names if answered.get(h) is False and h not in self.out)
        for h in names:
            if answered.get(h) is True:
                self.out.pop(h, None)  # back after its cooldown
            elif answered.get(h) is False:
                self.out.setdefault(h, now)
        self.losses += [Loss(h, now, why) for h in lost_now]
        left_out = frozenset(self.out)
        room = sum(n for h, n in slots.items() if h not in left_out)
        fit = min(ranks, room)
        if not lost_now:
            return Next(False, left_out, fit, (), "")
        lost_text = ", ".join(lost_now)
        if len(self.losses) > self.max_failures:
            return Next(
                False,
                left_out,
                fit,
                lost_now,
                (
                    f"host(s) {lost_text} lost: {len(self.losses)} host losses in this job, more than "
                    f"--max-host-failures={self.max_failures}; not launching again (the checkpoint is kept: "
                    "rerun once the hosts are back, or raise --max-host-failures)"
                ),
            )
        if fit < self.fewest:
            usable = ", ".join(f"{h}:{n}" for h, n in slots.items() if h not in left_out) or "none"
            return Next(
                False,
                left_out,
                fit,
                lost_now,
                (
                    f"host(s) {lost_text} lost: the hosts left ({usable}) have {room} slot(s), and a fit needs at "
                    f"least {self.fewest} ranks (a driver, a worker and its spares, if any); not launching again (the checkpoint is kept: "
                    "rerun with more hosts)"
                ),
            )
        return Next(
            True,
            left_out,
            fit,
            lost_now,
            (
                f"host(s) {lost_text} did not answer: launching again without {', '.join(sorted(left_out))} on "
                f"{fit} ranks (was {ranks}); host loss {len(self.losses)} of at most {self.max_failures}"
            ),
        )
