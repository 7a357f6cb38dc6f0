"""Fault plans: parsing (API, JSON, compact strings), validation, matching, firing once."""

from __future__ import annotations

import json

import pytest

from mixle_mpi.chaos import fault_actor, fault_plan
from mixle_mpi.chaos.fault_actor import FaultInjector
from mixle_mpi.chaos.fault_plan import (
    ACTIONS,
    ENV_VAR,
    PHASES,
    SCOPES,
    Fault,
    parse_plan,
    plan_from_env,
    plan_to_json,
    read_fired,
)
from mixle_mpi.core.errors import ConfigError


# -- parse_plan: empty forms -------------------------------------------------------
@pytest.mark.parametrize("spec", [None, "", [], (), "   ", ",", " , ,"])
def test_empty_plans(spec):
    assert parse_plan(spec) == ()


def test_empty_json_list():
    assert parse_plan("[]") == ()


# -- parse_plan: structured forms --------------------------------------------------
def test_single_dict():
    assert parse_plan({"worker": 2, "action": "kill", "phase": "estep_before", "call": 3}) == (
        Fault(2, "kill", "estep_before", 3, 0, "any"),
    )


def test_list_of_dicts_and_faults():
    f = Fault(1, "stop", "llsum")
    plan = parse_plan([{"worker": 2, "action": "exit", "phase": "init"}, f])
    assert plan == (Fault(2, "exit", "init", 0, 0, "any"), f)


def test_single_fault_object():
    f = Fault(3, "kill", "respawn")
    assert parse_plan(f) == (f,)


def test_json_list():
    text = json.dumps(
        [
            {
                "worker": 2,
                "action": "kill",
                "phase": "estep_mid",
                "call": 1,
                "incarnation": 1,
                "scope": "recovery",
            },
            {"worker": 3, "action": "stop", "phase": "init"},
        ]
    )
    assert parse_plan(text) == (
        Fault(2, "kill", "estep_mid", 1, 1, "recovery"),
        Fault(3, "stop", "init", 0, 0, "any"),
    )


def test_json_object_with_whitespace():
    text = '  {"worker": 4, "action": "exit", "phase": "llsum", "call": 2}  '
    assert parse_plan(text) == (Fault(4, "exit", "llsum", 2, 0, "any"),)


def test_invalid_json():
    with pytest.raises(ConfigError, match="not valid JSON"):
        parse_plan('[{"worker": 2,')


def test_json_entry_not_a_dict():
    with pytest.raises(ConfigError, match="must be a dict or Fault; found int"):
        parse_plan("[1]")


def test_list_entry_string_rejected():
    with pytest.raises(ConfigError, match="found str"):
        parse_plan(["2:kill:init"])


@pytest.mark.parametrize(
    "entry",
    [
        {"worker": 2, "action": "kill"},  # missing phase
        {"worker": 2, "action": "kill", "phase": "init", "when": 3},  # unknown field
        {},
    ],
)
def test_bad_dict_entries(entry):
    with pytest.raises(ConfigError, match="bad fault entry"):
        parse_plan([entry])
    with pytest.raises(ConfigError, match="bad fault entry"):
        parse_plan(json.dumps(entry))


# -- parse_plan: compact strings ---------------------------------------------------
def test_compact_basic():
    assert parse_plan("2:kill:estep_before:3") == (Fault(2, "kill", "estep_before", 3, 0, "any"),)


def test_compact_minimal():
    assert parse_plan("2:kill:init") == (Fault(2, "kill", "init", 0, 0, "any"),)


def test_compact_with_incarnation():
    assert parse_plan("2:kill:estep_before:3:1") == (Fault(2, "kill", "estep_before", 3, 1, "any"),)


def test_compact_with_scope_and_blank_incarnation():
    (f,) = parse_plan("2:kill:estep_mid:1::recovery")
    assert f == Fault(2, "kill", "estep_mid", 1, 0, "recovery")
    (g,) = parse_plan("3:stop:respawn:0::own")
    assert g.incarnation == 1 and g.scope == "own"  # respawn defaults to the first replacement


def test_compact_all_fields():
    assert parse_plan("5:exit:estep_after_reply:2:3:own") == (
        Fault(5, "exit", "estep_after_reply", 2, 3, "own"),
    )


def test_compact_several_items():
    plan = parse_plan(" 2:kill:estep_before:1 , 3:stop:llsum ,4:exit:respawn,")
    assert plan == (
        Fault(2, "kill", "estep_before", 1),
        Fault(3, "stop", "llsum"),
        Fault(4, "exit", "respawn", 0, 1),
    )


@pytest.mark.parametrize("text", ["2", "2:kill", "2:kill:init:0:0:any:4:extra", "1:2:3:4:5:6:7:8"])
def test_compact_wrong_number_of_fields(text):
    with pytest.raises(
        ConfigError, match=r"worker:action:phase\[:call\[:incarnation\[:scope\[:factor\]\]\]\]"
    ):
        parse_plan(text)


@pytest.mark.parametrize(
    "text",
    ["x:kill:init", "2:kill:init:once", "2:kill:init:1:first", "2:kill:init:", "2.5:kill:init"],
)
def test_compact_non_integers(text):
    with pytest.raises(ConfigError, match="must be integers"):
        parse_plan(text)


def test_plan_from_env():
    assert plan_from_env({}) == ()
    assert plan_from_env({ENV_VAR: ""}) == ()
    assert plan_from_env({ENV_VAR: "2:kill:init"}) == (Fault(2, "kill", "init"),)


def test_plan_from_env_defaults_to_os_environ(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "3:stop:llsum:4")
    assert plan_from_env() == (Fault(3, "stop", "llsum", 4),)


def test_plan_to_json_round_trip():
    plan = parse_plan("2:kill:estep_before:3,3:stop:respawn,4:exit:estep_mid:1:2:recovery")
    assert parse_plan(plan_to_json(plan)) == plan
    assert json.loads(plan_to_json(())) == []


# -- validation ----------------------------------------------------------------------
def _assert_lists(exc, values):
    msg = str(exc.value)
    for v in values:
        assert repr(v) in msg, (v, msg)


def test_unknown_action_lists_valid_actions():
    with pytest.raises(ConfigError) as exc:
        parse_plan("2:explode:init")
    assert "'explode'" in str(exc.value)
    _assert_lists(exc, ACTIONS)


def test_unknown_phase_lists_valid_phases():
    with pytest.raises(ConfigError) as exc:
        parse_plan("2:kill:mstep")
    assert "'mstep'" in str(exc.value)
    _assert_lists(exc, PHASES)


def test_unknown_scope_lists_valid_scopes():
    with pytest.raises(ConfigError) as exc:
        parse_plan("2:kill:init:0:0:mine")
    assert "'mine'" in str(exc.value)
    _assert_lists(exc, SCOPES)


@pytest.mark.parametrize("worker", [-1, True, 2.0, "2", None])
def test_bad_worker(worker):
    with pytest.raises(ConfigError, match="rank >= 0"):
        Fault(worker, "kill", "init")
    with pytest.raises(ConfigError, match="rank >= 0"):
        parse_plan({"worker": worker, "action": "kill", "phase": "init"})


def test_worker_zero_is_the_driver_with_driver_phases_only():
    with pytest.raises(ConfigError, match="driver .rank 0. can only fault at"):
        parse_plan("0:kill:init")
    assert parse_plan("0:kill:estep_before:3")[0].worker == 0
    assert parse_plan("0:kill:checkpoint_write:2")[0].phase == "checkpoint_write"
    with pytest.raises(ConfigError, match="driver only"):
        parse_plan("2:kill:checkpoint_write:2")
    assert (
        parse_plan("0:kill:shrink:1")[0].phase == "shrink"
    )  # the driver, once it told the survivors to shrink
    with pytest.raises(ConfigError, match="'shrink' happens on the driver only"):
        parse_plan("1:kill:shrink:1")
    # the driver's respawn phase is its own process (incarnation 0), a worker's its replacement's
    assert (
        parse_plan("0:kill:respawn")[0].incarnation == 0
        and parse_plan("2:kill:respawn")[0].incarnation == 1
    )
    driver = FaultInjector(parse_plan("0:kill:estep_mid:3:0:recovery"), 0, 0)
    assert not driver.plan[0].matches(
        0, 0, "estep_mid", 3, False
    )  # a journaled result is not a recovery
    assert driver.plan[0].matches(0, 0, "estep_mid", 3, True)


@pytest.mark.parametrize("call", [-1, True, 1.0, "1", None])
def test_bad_call(call):
    with pytest.raises(ConfigError, match="call must be an integer >= 0"):
        Fault(2, "kill", "init", call)


def test_negative_call_compact():
    with pytest.raises(ConfigError, match="call must be an integer >= 0; found -1"):
        parse_plan("2:kill:estep_before:-1")


def test_config_error_is_a_value_error():
    with pytest.raises(ValueError):
        parse_plan("2:kill:nowhere")


@pytest.mark.parametrize("incarnation", [-1, "1", True])
def test_bad_incarnation_rejected(incarnation):
    with pytest.raises(ConfigError):
        Fault(2, "kill", "init", 0, incarnation)


@pytest.mark.parametrize("spec", [5, True, 2.5])
def test_non_iterable_spec_is_config_error(spec):
    with pytest.raises(ConfigError):
        parse_plan(spec)


# -- Fault defaults and matching ------------------------------------------------------
def test_defaults():
    f = Fault(2, "kill", "estep_before")
    assert (f.call, f.incarnation, f.scope) == (0, 0, "any")
    assert Fault(2, "kill", "respawn").incarnation == 1
    assert Fault(2, "kill", "respawn", incarnation=3).incarnation == 3
    assert Fault(2, "kill", "init", incarnation=2).incarnation == 2


def test_fault_is_frozen():
    f = Fault(2, "kill", "init")
    with pytest.raises(AttributeError):
        f.worker = 3  # type: ignore[misc]


def test_matches_exact_fields():
    f = Fault(2, "kill", "estep_before", call=3)
    assert f.matches(2, 0, "estep_before", 3, False)
    assert f.matches(2, 0, "estep_before", 3, True)  # scope any
    assert not f.matches(3, 0, "estep_before", 3, False)  # other worker
    assert not f.matches(2, 1, "estep_before", 3, False)  # replacement process
    assert not f.matches(2, 0, "estep_mid", 3, False)  # other phase
    assert not f.matches(2, 0, "estep_before", 2, False)  # other call
    assert not f.matches(2, 0, "estep_before", 4, False)


def test_respawn_phase_ignores_call_and_defaults_to_first_replacement():
    f = Fault(2, "kill", "respawn", call=7)
    for call in (0, 1, 7, 100):
        assert f.matches(2, 1, "respawn", call, False)
    assert not f.matches(2, 0, "respawn", 7, False)  # the original process never "respawns"
    assert not f.matches(2, 2, "respawn", 7, False)
    g = Fault(2, "kill", "respawn", incarnation=2)
    assert g.matches(2, 2, "respawn", 0, False) and not g.matches(2, 1, "respawn", 0, False)


def test_spawn_phase_fires_in_the_next_starting_replacement_whoever_it_replaces():
    f = Fault(2, "kill", "spawn")
    assert f.incarnation == 1
    assert f.matches(0, 1, "spawn", 0, False) and f.matches(5, 3, "spawn", 9, False)
    assert not f.matches(2, 1, "respawn", 0, False)
    assert not Fault(2, "kill", "respawn").matches(2, 1, "spawn", 0, False)
    with pytest.raises(ConfigError, match="driver"):
        Fault(0, "kill", "spawn")


def test_pending_from_env_skips_what_the_fault_log_says_fired(tmp_path):
    log = tmp_path / "faults.jsonl"
    env = {
        fault_plan.ENV_VAR: "2:kill:spawn,3:kill:spawn,1:kill:startup",
        fault_plan.FIRED_ENV: str(log),
    }
    assert [f.worker for f in fault_plan.pending_from_env(("spawn",), env)] == [2, 3]
    fault_actor.record_fired(Fault(2, "kill", "spawn"), str(log))
    assert [f.worker for f in fault_plan.pending_from_env(("spawn",), env)] == [3]
    assert [f.phase for f in fault_plan.pending_from_env(fault_plan.STARTUP_PHASES, env)] == [
        "startup"
    ]
    assert (
        fault_plan.pending_from_env(("spawn",), {fault_plan.ENV_VAR: "bad plan"}) == []
    )  # the driver reports it


def test_a_replacement_is_known_by_its_environment_before_mpi_init():
    assert not fault_plan.started_by_spawn({"PMI_RANK": "0"})
    assert fault_plan.started_by_spawn({"PMI_SPAWNED": "1"}) and fault_plan.started_by_spawn(
        {"OMPI_PARENT_PORT": "x"}
    )


def test_scope_own_and_recovery():
    own = Fault(2, "kill", "estep_mid", 1, scope="own")
    rec = Fault(2, "kill", "estep_mid", 1, scope="recovery")
    anyf = Fault(2, "kill", "estep_mid", 1, scope="any")
    assert own.matches(2, 0, "estep_mid", 1, recovery=False)
    assert not own.matches(2, 0, "estep_mid", 1, recovery=True)
    assert rec.matches(2, 0, "estep_mid", 1, recovery=True)
    assert not rec.matches(2, 0, "estep_mid", 1, recovery=False)
    assert anyf.matches(2, 0, "estep_mid", 1, recovery=True)
    assert anyf.matches(2, 0, "estep_mid", 1, recovery=False)


# -- FaultInjector --------------------------------------------------------------------
@pytest.fixture
def performed(monkeypatch):
    fired = []
    monkeypatch.setattr(fault_actor, "_perform", fired.append)
    return fired


def test_injector_fires_once(performed):
    f = Fault(2, "kill", "estep_before", 1)
    inj = FaultInjector([f], worker=2, incarnation=0)
    inj.check("estep_before", 0)
    assert performed == []
    inj.check("estep_before", 1)
    assert performed == [f]
    inj.check("estep_before", 1)
    inj.check("estep_before", 1, recovery=True)
    assert performed == [f]


def test_injector_ignores_other_workers_and_incarnations(performed):
    plan = parse_plan("2:kill:init,3:kill:init,2:stop:init:0:1")
    FaultInjector(plan, worker=2, incarnation=0).check("init", 0)
    assert performed == [plan[0]]
    performed.clear()
    FaultInjector(plan, worker=2, incarnation=1).check("init", 0)
    assert performed == [plan[2]]
    performed.clear()
    FaultInjector(plan, worker=4, incarnation=0).check("init", 0)
    assert performed == []


def test_injector_each_entry_once_in_plan_order(performed):
    plan = parse_plan("2:stop:llsum:0,2:kill:llsum:0,2:exit:llsum:1")
    inj = FaultInjector(plan, worker=2, incarnation=0)
    inj.check("llsum", 0)
    assert performed == [plan[0], plan[1]]  # both matching entries, in plan order
    inj.check("llsum", 0)
    assert performed == [plan[0], plan[1]]
    inj.check("llsum", 1)
    assert performed == list(plan)
    inj.check("llsum", 1)
    assert performed == list(plan)


def test_injector_respawn_fires_once_whatever_the_call(performed):
    (f,) = parse_plan("3:kill:respawn")
    inj = FaultInjector([f], worker=3, incarnation=1)
    inj.check("respawn", 5)
    inj.check("respawn", 6)
    assert performed == [f]


def test_injector_scope(performed):
    plan = parse_plan("2:kill:estep_mid:0:0:recovery,2:stop:estep_mid:0:0:own")
    inj = FaultInjector(plan, worker=2, incarnation=0)
    inj.check("estep_mid", 0, recovery=True)
    assert performed == [plan[0]]
    inj.check("estep_mid", 0, recovery=False)
    assert performed == [plan[0], plan[1]]


def test_injector_default_call_and_recovery(performed):
    (f,) = parse_plan("2:exit:init")
    FaultInjector([f], 2, 0).check("init")
    assert performed == [f]


def test_injector_empty_plan(performed):
    inj = FaultInjector((), 2, 0)
    for phase in PHASES:
        inj.check(phase, 0)
    assert performed == []


# -- the victim records its fault before it acts ----------------------------------------
VICTIM = """
import sys
from mixle_mpi.chaos.fault_plan import parse_plan
from mixle_mpi.chaos.fault_actor import FaultInjector
FaultInjector(parse_plan(sys.argv[1]), worker=2, incarnation=0).check("estep_before", 1)
print("survived", flush=True)
"""


def _victim(plan: str, env_log, tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != fault_plan.FIRED_ENV}
    if env_log is not None:
        env[fault_plan.FIRED_ENV] = str(env_log)
    return subprocess.run(
        [sys.executable, "-c", VICTIM, plan],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=60,
    )


@pytest.mark.parametrize("action, returncode", [("kill", -9), ("exit", 3)])
def test_victim_process_records_before_it_dies(action, returncode, tmp_path):
    from mixle_mpi.chaos.fault_plan import read_fired, unfired

    log = tmp_path / "faults.jsonl"
    plan = f"2:{action}:estep_before:1"
    proc = _victim(plan, log, tmp_path)
    assert proc.returncode == returncode, proc.stderr
    assert "survived" not in proc.stdout  # it really acted
    (rec,) = read_fired(str(log))
    assert {
        k: rec[k] for k in ("event", "worker", "action", "phase", "call", "incarnation", "scope")
    } == {
        "event": "fault_fired",
        "worker": 2,
        "action": action,
        "phase": "estep_before",
        "call": 1,
        "incarnation": 0,
        "scope": "any",
    }
    assert isinstance(rec["pid"], int) and rec["pid"] > 1 and rec["host"]
    assert f"pid={rec['pid']}" in proc.stderr  # the stderr line names the same process
    assert unfired(plan, [rec]) == []
    assert (log.stat().st_mode & 0o777) == 0o600


def test_a_fault_that_does_not_match_leaves_no_record(tmp_path):
    from mixle_mpi.chaos.fault_plan import read_fired, unfired

    log = tmp_path / "faults.jsonl"
    proc = _victim("2:kill:estep_before:2", log, tmp_path)  # call 2 never comes
    assert proc.returncode == 0 and "survived" in proc.stdout
    assert not log.exists() and read_fired(str(log)) == []
    assert unfired("2:kill:estep_before:2", []) == [Fault(2, "kill", "estep_before", 2)]


def test_an_unwritable_record_still_acts_and_says_why(tmp_path):
    proc = _victim("2:exit:estep_before:1", tmp_path / "missing-dir" / "faults.jsonl", tmp_path)
    assert proc.returncode == 3
    assert "cannot record the fault" in proc.stderr


def test_record_fired_without_a_log_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(fault_plan.FIRED_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    fault_actor.record_fired(Fault(2, "kill", "init"))
    assert list(tmp_path.iterdir()) == []


def test_records_append_one_whole_line_each(tmp_path):
    from mixle_mpi.chaos.fault_plan import read_fired

    log = tmp_path / "f.jsonl"
    plan = parse_plan("1:kill:init,2:stop:respawn,0:kill:checkpoint_write:4")
    for f in plan:
        fault_actor.record_fired(f, str(log))
    lines = log.read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(x)["event"] == "fault_fired" for x in lines)
    assert [
        Fault(**{k: r[k] for k in ("worker", "action", "phase", "call", "incarnation", "scope")})
        for r in read_fired(str(log))
    ] == list(plan)


# -- planned against fired ----------------------------------------------------------------
def _rec(text: str) -> dict:
    (f,) = parse_plan(text)
    return fault_actor.fired_record(f)


def test_unfired_matches_every_field():
    from mixle_mpi.chaos.fault_plan import unfired

    plan = "1:kill:estep_mid:2:0,1:stop:estep_before:4:1,2:kill:estep_before:2:0:recovery"
    assert (
        unfired(
            plan,
            [
                _rec("1:kill:estep_mid:2:0"),
                _rec("1:stop:estep_before:4:1"),
                _rec("2:kill:estep_before:2:0:recovery"),
            ],
        )
        == []
    )
    missing = unfired(
        plan,
        [
            _rec("1:kill:estep_mid:2:0"),
            _rec("1:stop:estep_before:4:0"),  # other incarnation
            _rec("2:kill:estep_before:2:0:own"),
        ],
    )  # other scope
    assert missing == list(parse_plan(plan))[1:]
    assert unfired(plan, [_rec("1:kill:estep_mid:3:0")]) == list(parse_plan(plan))  # other call
    assert unfired("", []) == []


def test_one_record_accounts_for_one_planned_fault():
    from mixle_mpi.chaos.fault_plan import unfired

    plan = "2:kill:llsum:0,2:kill:llsum:0"
    assert unfired(plan, [_rec("2:kill:llsum:0")]) == [Fault(2, "kill", "llsum", 0)]
    assert unfired(plan, [_rec("2:kill:llsum:0")] * 2) == []


def test_read_fired_skips_other_events_and_a_torn_line(tmp_path):
    from mixle_mpi.chaos.fault_plan import read_fired

    log = tmp_path / "events.jsonl"
    good = _rec("3:stop:estep_mid:1")
    log.write_text(
        json.dumps({"event": "start", "time": 1.0})
        + "\n"
        + json.dumps(good)
        + "\n"
        + '{"event": "fault_fired", "worker": 1, "act'
    )
    assert read_fired(str(log)) == [good]
    assert read_fired(str(tmp_path / "absent.jsonl")) == []


# -- the campaign's verdict ---------------------------------------------------------------
@pytest.mark.parametrize(
    "args, verdict",
    [
        ((0, False, True, [], []), "ok"),
        ((0, False, True, [], [Fault(1, "kill", "init")]), "UNFIRED"),
        ((0, False, True, ["model.json differs"], [Fault(1, "kill", "init")]), "DIVERGED"),
        ((1, False, False, [], [Fault(1, "kill", "init")]), "FAILED(1)"),
        ((0, False, False, [], []), "FAILED(0)"),  # exit 0 but no model: not ok
        ((-1, True, False, [], []), "HUNG"),
    ],
)
def test_outcome(args, verdict):
    from mixle_mpi.chaos.campaign import outcome

    assert outcome(*args) == verdict


# -- campaign plans only hold faults the fit reaches -------------------------------------------
@pytest.mark.parametrize(
    "workers, shards, driver_computes",
    [
        (2, None, False),
        (3, None, False),
        (3, 6, False),
        (4, 2, False),
        (5, 3, False),
        (3, 1, False),
        (6, 16, False),
        (3, 8, True),
        (2, 16, True),
        (3, 3, True),
    ],
)
def test_random_plans_pick_victims_that_reach_their_fault(workers, shards, driver_computes):
    import random

    from mixle_mpi.chaos.campaign import KINDS, random_plans
    from mixle_mpi.policy.placement import driver_share, initial_placement, plan_recovery

    here = driver_share(shards or workers, workers, driver_computes)
    owners = initial_placement(shards or workers, range(1, workers + 1), skip=here)
    holders = {w for w, s in owners.items() if s}
    for seed in range(20):
        rounds = 1 + seed % 7
        plans = random_plans(random.Random(seed), 10, workers, rounds, shards, driver_shards=here)
        expected_kinds = set(KINDS) if workers >= 3 and len(holders) >= 2 else set(KINDS[:3])
        if rounds < 2:
            expected_kinds.discard("repeat")  # no later round for the replacement to die in
        assert {p.kind for p in plans} == expected_kinds
        for p in plans:
            plan = parse_plan(p.plan)
            assert len(plan) == p.faults
            assert plan[0].worker in holders, p  # a worker with no shard gets no task
            assert all(f.call < rounds for f in plan), p
            if p.kind == "recovery":
                a, b = plan[0].worker, plan[1].worker
                assert b in plan_recovery(owners[a], owners, [w for w in owners if w != a]), p
            if p.kind == "double":
                assert plan[1].worker in holders and plan[1].worker != plan[0].worker, p


def test_compact_form_round_trips():
    from mixle_mpi.chaos.campaign import compact

    for f in parse_plan("2:kill:estep_mid:1::recovery,3:stop:respawn,0:kill:checkpoint_write:4"):
        assert parse_plan(compact(f)) == (f,)


def test_delay_is_a_straggler_that_sleeps_once_and_is_recorded(tmp_path, monkeypatch):
    slept = []
    monkeypatch.setattr(fault_actor.time, "sleep", slept.append)
    log = tmp_path / "faults.jsonl"
    monkeypatch.setenv(fault_plan.FIRED_ENV, str(log))
    f = Fault(1, "delay", "estep_before", 3)
    inj = FaultInjector([f], worker=1, incarnation=0)
    inj.check("estep_before", 3)
    inj.check("estep_before", 3)
    assert slept == [fault_plan.DELAY_SECONDS]
    assert fault_plan.unfired([f], fault_plan.read_fired(str(log))) == []
    Fault(0, "delay", "estep_mid", 2)  # the driver may straggle too


def test_a_plan_acting_in_a_replacements_rounds_needs_the_fit_to_wait_for_it():
    assert fault_plan.needs_replacement_rounds("3:kill:estep_mid:4:0,3:kill:estep_before:5:1")
    assert fault_plan.needs_replacement_rounds("3:kill:estep_mid:3:0,3:kill:respawn:0:1")
    assert not fault_plan.needs_replacement_rounds("3:kill:estep_mid:3:0,2:stop:llsum:1")
    assert not fault_plan.needs_replacement_rounds("2:kill:estep_before:1,2:kill:spawn")
    assert not fault_plan.needs_replacement_rounds("")


def test_the_load_phase_names_a_workers_nth_load_in_one_process():
    (first,) = parse_plan("3:kill:load")
    assert (first.phase, first.call, first.incarnation) == ("load", 0, 0)
    assert first.matches(3, 0, "load", 0, False)
    assert not first.matches(3, 0, "load", 1, False)  # its second load (a migration, say)
    assert not first.matches(3, 1, "load", 0, False)  # its replacement's first load
    (replacement,) = parse_plan("3:kill:load:0:1")
    assert replacement.matches(3, 1, "load", 0, False)
    with pytest.raises(ConfigError, match="driver .* can only fault at"):
        parse_plan("0:kill:load")


def test_slow_stretches_each_shard_from_its_call_on_and_only_for_a_worker_at_a_tasks_start(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("MIXLE_MPI_FAULT_LOG", str(tmp_path / "fired.jsonl"))
    plan = parse_plan("2:slow:estep_before:1,3:slow:estep_before:0:0::2.5")
    assert plan[0].factor == 4.0 and plan[1].factor == 2.5
    inj = FaultInjector(plan, 2, 0)
    inj.check("estep_before", 0)
    assert inj.slowdown == 1.0
    inj.check("estep_before", 1)  # the process goes on (no signal): only its shards take longer
    assert inj.slowdown == 4.0
    assert [r["action"] for r in read_fired(str(tmp_path / "fired.jsonl"))] == ["slow"]
    for bad in ("0:slow:estep_before", "2:slow:estep_mid", "2:slow:init:0:0::0.5"):
        with pytest.raises(ConfigError):
            parse_plan(bad)
