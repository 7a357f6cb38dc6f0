"""The job's real driver code (runtime.driver, round, reconfiguring, arrivals, mailroom) in
a simulated world: 10,000 seeded schedules of deaths, hangs, pauses, slow workers,
duplicate and late replies, deaths during recovery and right after a respawn, failed
Spawns, background joins, adopted spares and the driver's own share (mixle_mpi/sim)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mixle_mpi.policy import round_plan

# The simulation imports the runtime, and mpi4py initializes MPI when imported: imported
# inside the tests, so that collecting this file does not start MPI in the test process
# (tests/test_unit_dryrun.py checks a dry run never does).


def _sim():
    from mixle_mpi.sim import check, world

    return check, world


@pytest.fixture(scope="module")
def outcomes():
    return _sim()[0].simulate(range(10_000))


def total(outcomes, what: str) -> int:
    return sum(o.counts[what] for o in outcomes)


def test_ten_thousand_schedules_fold_exactly_once_with_the_failure_free_bits_and_end(outcomes):
    assert len(outcomes) == 10_000
    check, _ = _sim()
    assert all(o.events < check.EVENT_BOUND for o in outcomes)
    finished = [o for o in outcomes if not o.no_workers]
    from mixle_mpi.sim.schedule import Schedule

    assert all(
        o.rounds_done == Schedule.draw(i).rounds for i, o in enumerate(outcomes) if not o.no_workers
    )
    # a job runs out of workers only sometimes (every place past max_retries or unreplaceable)
    assert 0 < len(outcomes) - len(finished) < len(outcomes) // 10


def test_the_schedules_exercise_every_recovery_path(outcomes):
    """A simulation that never fails anyone proves nothing: each path runs many times."""
    assert total(outcomes, "failure_detected") > 2000
    assert total(outcomes, "recovery") > 2000  # orphaned shards recomputed on survivors
    assert total(outcomes, "respawned") > 300  # replacements that joined in the background
    assert total(outcomes, "respawn_started") > total(outcomes, "respawned")  # some died on the way
    assert total(outcomes, "spare_adopted") > 100
    assert total(outcomes, "blacklisted") > 500 and total(outcomes, "migrated") > 500
    assert total(outcomes, "store_unread") > 500  # a worker could not read its own shards
    assert total(outcomes, "spawn_unavailable") > 20
    assert sum(o.late for o in outcomes) > 100  # fenced processes answered late: never folded
    assert sum(o.duplicates for o in outcomes) > 1000  # Results delivered twice: folded once
    assert total(outcomes, "speculated") > 1000  # slow workers' shards copied to idle ones ...
    assert (
        total(outcomes, "speculation_won") > 500
    )  # ... and the copies won: the first result counts
    assert total(outcomes, "rebalanced") > 300  # shards moved off a worker that stayed slow


def test_a_replay_of_a_seed_is_identical():
    from mixle_mpi.sim.schedule import Schedule

    check, _ = _sim()
    assert check.run(Schedule.draw(4242)) == check.run(Schedule.draw(4242))


def test_seed_24409_a_joined_replacement_waiting_for_a_slow_round_is_not_hung():
    """Issue 50: a replacement held all its shards, and the round it waited for (its
    survivors slowed to a fraction of their speed) outlasted reconfigure_timeout: it was
    declared hung while joining. One that holds everything awaits nothing but the boundary."""
    from mixle_mpi.sim.schedule import Schedule

    check, _ = _sim()
    assert check.run(Schedule.draw(24409)).rounds_done == 4


def test_a_seed_replays_from_the_command_line():
    out = subprocess.run(
        [sys.executable, "-m", "mixle_mpi.sim", "--seed", "65"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "Schedule(seed=65" in out.stdout and "Outcome(rounds_done=" in out.stdout


class FoldsEveryCopy(round_plan.RoundState):
    """A broken round: every accepted payload is folded, a copy sent ahead or twice too."""

    def accept(self, worker, incarnation, shard, live):
        return self.assigned.get(shard, (None, None))[0] == worker

    def fold_once(self, shard):
        self.folded.add(shard)
        return True


def test_the_simulation_catches_a_round_that_folds_a_shard_twice(monkeypatch):
    """The checker is alive: the real Round with a broken fold rule is caught, and the
    violation says how to replay it."""
    from mixle_mpi.runtime import round as round_module

    check, world = _sim()
    monkeypatch.setattr(round_module, "RoundState", FoldsEveryCopy)
    with pytest.raises(
        world.Violation, match=r"(?s)folded twice.*replay: python -m mixle_mpi\.sim --seed \d+"
    ):
        check.simulate(range(3000))


def test_the_simulation_catches_a_driver_that_releases_the_copies_it_still_needs(monkeypatch):
    """Release every kept copy at once (not only the shards whose place holds them again),
    while the placement still counts on them: a survivor is then asked for a shard it
    dropped."""
    from mixle_mpi.policy import places

    check, world = _sim()
    monkeypatch.setattr(places, "release_plan", lambda kept, shards: _everything(kept))
    with pytest.raises(world.Violation, match="does not hold|raised"):
        check.simulate(range(3000))


def _everything(kept):
    plan = {}
    for shard, holder in kept.items():
        plan.setdefault(holder, []).append(shard)
    return plan


def test_a_large_job_runs_one_round_with_deaths_and_hangs():
    from mixle_mpi.sim.schedule import Schedule

    check, _ = _sim()
    faults = [(0.3, 7, "die", 0.0), (0.5, 19, "hang", 5.0), (1.0, 33, "die", 0.0)]
    out = check.run(
        Schedule(1, 50, 0, 2000, 1, 3, True, True, False, False, False, 0.0, False, {}, faults)
    )
    assert (
        out.rounds_done == 1 and out.counts["failure_detected"] >= 3 and out.counts["recovery"] >= 3
    )


# the share of mixle_mpi/runtime's statements the simulation runs today (bench/sim_coverage.py,
# 10,000 seeds: bench/results/sim_coverage.md); issue 49 asks for 70 %
COVERAGE_FLOOR = 30.0


def test_the_simulation_runs_at_least_its_share_of_the_runtime_and_says_how_much(capsys):
    """coverage.py over 1,000 seeds (bench/sim_coverage.py): the runtime's share the
    simulation runs never falls, and the driver's own modules are nearly all run."""
    import json
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "bench" / "sim_coverage.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--seeds", "1000", "--json", "-"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    with capsys.disabled():
        print(
            f"\nsimulation coverage of mixle_mpi/runtime: {result['runtime_percent']} % "
            f"over {result['seeds']} seeds (target {result['target_percent']:g} %)"
        )
    assert result["schedules_run"] == 1000
    assert result["runtime_percent"] >= COVERAGE_FLOOR, result
    mods = result["modules"]
    assert mods["runtime/round.py"] >= 90 and mods["runtime/driver.py"] >= 75, mods
