"""A discrete-event simulation of the driver's policy: rounds, failures, reconfiguration.

The same pure pieces the driver uses (:class:`~mixle_mpi.policy.rounds.RoundState`,
:class:`~mixle_mpi.policy.membership.Membership`, :mod:`~mixle_mpi.policy.placement`) run against a
simulated clock and transport: workers compute for random times, die, hang (and are fenced
after a detection delay, then send late replies), die again while recomputing someone
else's shards or right after being respawned. Each schedule is checked for what makes a
fit exact and bounded:

- every shard of every round is accepted exactly once, from the process it was assigned
  to while that process was live, with the value that shard really has (never a fenced
  or replaced process's late reply);
- every round ends (all shards, or no worker left), within a bounded number of events.

Thousands of schedules run in seconds (tests/test_unit_simulation.py); a failing seed
replays exactly. No MPI, no threads, no sleeping.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from mixle_mpi.policy.membership import Membership
from mixle_mpi.policy.placement import initial_placement
from mixle_mpi.policy import reconfig_plan
from mixle_mpi.policy.rounds import Done, NeedWorkers, Recover, RoundState, Wait

MAX_EVENTS = 100_000  # per schedule, or 20 per shard and round when that is more


class Violation(AssertionError):
    """The policy broke exactness or termination on this schedule (the seed replays it)."""


@dataclass
class Schedule:
    """One random scenario: layout, timings and faults, all drawn from ``seed``."""

    seed: int
    workers: int
    shards: int
    rounds: int
    max_retries: int
    respawn: bool
    faults: list = field(default_factory=list)  # (round, time, worker, kind) kind: die | hang

    @classmethod
    def draw(cls, seed: int) -> "Schedule":
        rng = random.Random(seed)
        workers = rng.randint(1, 6)
        shards = rng.randint(1, 3 * workers + 2)
        rounds = rng.randint(1, 4)
        faults = []
        for _ in range(rng.choice([0, 1, 1, 2, 3, 5])):
            faults.append((rng.randrange(rounds), rng.uniform(0.0, 3.0), rng.randint(1, workers),
                           rng.choice(["die", "die", "hang"])))
        return cls(seed, workers, shards, rounds, rng.randint(1, 3), rng.random() < 0.8, sorted(faults))


@dataclass
class Outcome:
    rounds_done: int
    no_workers: bool
    events: int
    accepted: int
    rejected: int


def true_value(round_no: int, shard: int) -> tuple:
    """What a shard's result really is in a round (the simulated E-step)."""
    return ("ok", round_no, shard)


class Simulation:
    """Drives the policy through one schedule; :meth:`run` raises Violation or returns Outcome."""

    DETECT = (0.05, 1.0)       # a death is noticed this long after it happens
    STALL = 2.0                # a hung process is fenced this long after it stopped
    COMPUTE = (0.01, 0.5)      # per shard
    EAGER = False              # True: ask next_step after every event (the reference the
    #                            default is tested against); False: only after an event that
    #                            changed who is live, else RoundState.done() (same answers)

    def __init__(self, schedule: Schedule) -> None:
        self.s = schedule
        self.rng = random.Random(schedule.seed * 7919 + 1)
        ids = list(range(1, schedule.workers + 1))
        self.membership = Membership(ids, schedule.max_retries)
        self.owners = initial_placement(schedule.shards, ids)
        self.now = 0.0
        self.queue: list = []
        self.seq = 0
        self.events = 0
        self.state: dict[tuple, str] = {(w, 0): "up" for w in ids}  # process -> up | dead | hung
        self.accepted = self.rejected = 0
        self.max_events = max(MAX_EVENTS, 20 * schedule.shards * schedule.rounds)
        self._live_map: dict[int, int] | None = None  # cached until membership changes
        self._changes = 0                              # membership changes so far

    # -- the simulated world -----------------------------------------------------------------
    def _at(self, when: float, *event) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (when, self.seq, event))

    def _live(self) -> dict[int, int]:
        """Live worker -> incarnation; rebuilt only after a membership change (O(W))."""
        if self._live_map is None:
            self._live_map = {w: self.membership.records[w].incarnation for w in self.membership.live()}
        return self._live_map

    def _changed(self) -> None:
        self._live_map = None
        self._changes += 1

    def _send_task(self, round_no: int, worker: int, shards: list[int], rs: RoundState, recovery: bool) -> None:
        process = (worker, self.membership.records[worker].incarnation)
        if self.state.get(process) == "dead" and self.rng.random() < 0.5:
            self.membership.mark_failed(worker)  # ULFM: the send fails and says who is dead
            self._changed()
            return
        rs.sent(worker, process[1], shards, recovery)  # (MPICH: a send to the dead "succeeds")
        t = self.now
        for sid in shards:
            t += self.rng.uniform(*self.COMPUTE)
            self._at(t, "result", round_no, process, sid)

    def _fault(self, process: tuple, kind: str) -> None:
        if self.state.get(process) != "up":
            return
        self.state[process] = "dead" if kind == "die" else "hung"
        delay = self.rng.uniform(*self.DETECT) if kind == "die" else self.STALL
        self._at(self.now + delay, "detected", process)

    # -- one round, as the driver runs it ------------------------------------------------------
    def _round(self, round_no: int) -> bool:
        """Run one round; False if it ended with no worker left."""
        rs = RoundState(self.s.shards)
        got: dict[int, tuple] = {}
        for (r, t, w, kind) in self.s.faults:
            if r == round_no:
                self._at(self.now + t, "fault", w, kind)
        for w, sids in rs.own_work(self.owners, self._live()).items():
            self._send_task(round_no, w, sids, rs, False)
        step, asked = None, -1
        while True:
            if not self.EAGER and isinstance(step, Wait) and asked == self._changes:
                step = Done() if rs.done() else step  # nothing sent, nobody failed since
            else:
                step, asked = rs.next_step(self.owners, self._live()), self._changes
            if isinstance(step, Done):
                break
            if isinstance(step, NeedWorkers):
                self._reconfigure()
                if not self._live():
                    return False
                continue
            if isinstance(step, Recover):
                for w, sids in step.plan.items():
                    self._send_task(round_no, w, sids, rs, True)
                continue
            assert isinstance(step, Wait)
            if not self.queue:
                raise Violation(f"seed {self.s.seed}: round {round_no} waits with nothing in flight; "
                                f"missing {sorted(set(range(self.s.shards)) - rs.accepted)}")
            self._step_event(round_no, rs, got)
        if sorted(got) != list(range(self.s.shards)):
            raise Violation(f"seed {self.s.seed}: round {round_no} folded shards {sorted(got)}")
        for sid, value in got.items():
            if value != true_value(round_no, sid):
                raise Violation(f"seed {self.s.seed}: round {round_no} shard {sid} folded {value!r}")
        self._reconfigure()
        return True

    def _step_event(self, round_no: int, rs: RoundState, got: dict) -> None:
        self.events += 1
        if self.events > self.max_events:
            raise Violation(f"seed {self.s.seed}: no end after {self.max_events} events")
        self.now, _, event = heapq.heappop(self.queue)
        if event[0] == "fault":
            _, w, kind = event
            self._fault((w, self.membership.records[w].incarnation), kind)
        elif event[0] == "detected":
            _, (w, inc) = event
            if self.membership.records[w].incarnation == inc and self.membership.mark_failed(w):
                self._changed()
                if self.state[(w, inc)] == "hung":
                    self.state[(w, inc)] = "fenced"  # it may still answer: late replies
        elif event[0] == "result":
            _, r, process, sid = event
            if self.state.get(process) == "dead":
                return  # a dead process sends nothing
            if self.state.get(process) == "hung":  # it answers late: after it was fenced
                self._at(self.now + self.STALL + 0.1, "result", r, process, sid)
                return
            if self.state.get(process) == "fenced":
                value = ("late", r, sid)  # what a fenced process sent: must never be folded
            else:
                value = true_value(r, sid)
            if r == round_no and rs.accept(process[0], process[1], sid, self._live()):
                if sid in got:
                    raise Violation(f"seed {self.s.seed}: shard {sid} accepted twice in round {r}")
                got[sid] = value
                self.accepted += 1
            else:
                self.rejected += 1

    def _reconfigure(self) -> None:
        """The driver's reconfiguration: respawn below max_retries, else blacklist and migrate."""
        failed = [w for w, r in self.membership.records.items() if r.state == "dead"]
        for action in reconfig_plan.plan(failed, {}, self.membership, self.s.respawn, self.s.respawn):
            if isinstance(action, reconfig_plan.Respawn):
                inc = self.membership.revive(action.worker)
                self._changed()
                self.state[(action.worker, inc)] = "up"
                if self.rng.random() < 0.15:  # dies again right after the respawn
                    self._at(self.now + self.rng.uniform(0.0, 0.3), "fault", action.worker, "die")
            elif isinstance(action, reconfig_plan.Blacklist):
                self.membership.blacklist(action.worker)
                self._changed()
        live = self._live()
        move = reconfig_plan.migrate(self.owners, self.membership.blacklisted(), live) if live else None
        if move is not None:
            self.owners = move.owners

    def run(self) -> Outcome:
        done = 0
        for r in range(self.s.rounds):
            if not self._round(r):
                return Outcome(done, True, self.events, self.accepted, self.rejected)
            done += 1
        placed = sorted(s for ss in self.owners.values() for s in ss)
        if placed != list(range(self.s.shards)):
            raise Violation(f"seed {self.s.seed}: shards placed {placed} after reconfiguration")
        return Outcome(done, False, self.events, self.accepted, self.rejected)


def simulate(seeds) -> list[Outcome]:
    """Run the schedules of ``seeds``; the first violation is raised with its seed."""
    return [Simulation(Schedule.draw(seed)).run() for seed in seeds]
