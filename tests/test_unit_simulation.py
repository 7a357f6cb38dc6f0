"""The driver policy under 10,000 random schedules of deaths, hangs, late replies, deaths
during recovery and right after a respawn (pure: simulated clock and transport)."""

from __future__ import annotations

import pytest

from mixle_mpi.policy import rounds, simulation
from mixle_mpi.policy.simulation import Schedule, Simulation, Violation, simulate


def test_ten_thousand_random_schedules_fold_exactly_once_and_end():
    outcomes = simulate(range(10_000))
    assert all(o.events < simulation.MAX_EVENTS for o in outcomes)
    # the schedules really exercise failures: late replies rejected, some jobs run out of workers
    assert sum(o.rejected for o in outcomes) > 100
    assert 0 < sum(o.no_workers for o in outcomes) < len(outcomes) // 2


def test_a_replay_of_a_seed_is_identical():
    a, b = Simulation(Schedule.draw(4242)).run(), Simulation(Schedule.draw(4242)).run()
    assert a == b


class TrustsAnyReply(rounds.RoundState):
    """A broken policy: it folds the first reply for a shard, from whoever sends it."""

    def accept(self, worker, incarnation, shard, live):
        if shard in self.accepted:
            return False
        self.accepted.add(shard)
        return True


def test_the_simulation_catches_a_policy_that_folds_a_fenced_workers_reply(monkeypatch):
    monkeypatch.setattr(simulation, "RoundState", TrustsAnyReply)
    with pytest.raises(Violation, match="folded"):
        simulate(range(10_000))


class Eager(Simulation):
    EAGER = True


def test_asking_next_step_only_after_a_membership_change_changes_nothing():
    """Property test: the default loop (RoundState.done() after an event that changed no
    membership) against asking next_step after every event: identical outcomes, seed for seed."""
    for seed in range(3000):
        sched = Schedule.draw(seed)
        try:
            want = Eager(sched).run()
        except Violation as e:
            want = str(e)
        try:
            got = Simulation(sched).run()
        except Violation as e:
            got = str(e)
        assert got == want, seed


def test_a_large_schedule_runs_one_round_with_deaths_and_hangs():
    faults = [(0, 0.3, 7, "die"), (0, 0.5, 19, "hang"), (0, 1.0, 33, "die")]
    out = Simulation(Schedule(1, 50, 20_000, 1, 3, True, faults)).run()
    assert out.rounds_done == 1 and out.accepted >= 20_000 and out.events > simulation.MAX_EVENTS // 10
