"""The pure parts of ``mixle-mpi chaos --external`` (plans, which process is which, victim
choice, outcomes, the report), and its process watcher against fake (non-MPI) ranks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mixle_mpi.chaos import external_plan as cp
from mixle_mpi.core.errors import ConfigError

TAG = "t" * 32


# -- plans ------------------------------------------------------------------------------------
def test_plans_are_replayable_from_seed_run_and_draw_alone():
    a = cp.campaign_plans(7, 12, 9.0)
    assert a == cp.campaign_plans(7, 12, 9.0)
    assert a != cp.campaign_plans(8, 12, 9.0)
    # run 4's plan does not depend on how many runs the campaign has, nor on the other runs
    assert cp.external_plan(7, 4, 0, a[3].kind, 9.0) == a[3] == cp.campaign_plans(7, 4, 9.0)[3]
    assert cp.external_plan(7, 4, 1, a[3].kind, 9.0) != a[3]  # a redraw is another plan
    assert [p.kind for p in a] == list(cp.KINDS) * 2 + list(cp.KINDS[:2])


@pytest.mark.parametrize("kind", cp.KINDS)
def test_every_kind_has_its_signals_targets_and_gaps(kind):
    window = 8.0
    plans = [cp.external_plan(3, i, 0, kind, window) for i in range(1, 200)]
    firsts = [p.kills[0].delay for p in plans]
    assert all(0.0 <= t <= window for t in firsts)
    assert min(firsts) < 0.1 * window and max(firsts) > 0.9 * window  # uniform over the whole run
    for p in plans:
        assert p.kind == kind and all(0.0 <= k.pick < 1.0 for k in p.kills)
        sigs = [(k.signal, k.target) for k in p.kills]
        if kind == "driver":
            assert sigs == [("SIGKILL", "driver")]
        elif kind == "stop":
            assert sigs == [("SIGSTOP", "worker")]
        elif kind == "worker":
            assert sigs == [("SIGKILL", "worker")]
        else:
            assert sigs == [("SIGKILL", "worker")] * 2
            lo, hi = cp.TWO_WORKERS_GAP if kind == "two_workers" else cp.RECOVERY_GAP
            assert lo <= p.kills[1].delay <= hi
    if kind == "during_recovery":
        prefer = [p.kills[1].prefer_replacement for p in plans]
        assert any(prefer) and not all(prefer)


def test_three_draws_in_four_land_in_the_fit_counted_from_the_started_marker():
    window, fit = 20.0, 9.0
    plans = [cp.external_plan(3, i, 0, "worker", window, fit) for i in range(1, 801)]
    in_fit = [p.kills[0] for p in plans if p.kills[0].after == cp.STARTED]
    whole = [p.kills[0] for p in plans if p.kills[0].after == cp.LAUNCH]
    assert len(in_fit) + len(whole) == len(plans) and 0.70 < len(in_fit) / len(plans) < 0.80
    assert all(0.0 <= k.delay <= fit for k in in_fit) and max(k.delay for k in in_fit) > 0.9 * fit
    assert (
        all(0.0 <= k.delay <= window for k in whole) and max(k.delay for k in whole) > fit
    )  # startup included
    # the choice is the rng's: the same (seed, run, draw, windows) replays the same plan
    assert plans == [cp.external_plan(3, i, 0, "worker", window, fit) for i in range(1, 801)]
    assert cp.campaign_plans(3, 10, window, cp.KINDS, fit) == cp.replay_plans(
        3, [(i, 0) for i in range(1, 11)], window, cp.KINDS, fit
    )
    # a later kill stays relative to the one before it
    two = cp.external_plan(3, 2, 0, "two_workers", window, fit)
    assert two.kills[1].after == cp.LAUNCH and two.kills[1].delay <= cp.TWO_WORKERS_GAP[1]
    # no fit window, or a share of 0: every first kill over the whole run, and the plans of
    # earlier campaigns (no fit choice drawn) are unchanged
    for plan in [cp.external_plan(3, i, 0, "worker", window) for i in range(1, 50)] + [
        cp.external_plan(3, i, 0, "worker", window, fit, 0.0) for i in range(1, 50)
    ]:
        assert plan.kills[0].after == cp.LAUNCH
    assert cp.external_plan(3, 4, 0, "stop", window, fit, 0.0) == cp.external_plan(
        3, 4, 0, "stop", window
    )
    assert all(
        cp.external_plan(3, i, 0, "driver", window, fit, 1.0).kills[0].after == cp.STARTED
        for i in range(1, 50)
    )
    with pytest.raises(ConfigError, match="--fit-share must be a fraction in \\[0, 1\\]"):
        cp.check_campaign(3, 1, 1.0, cp.KINDS, 1.5)


def test_describe_names_signals_targets_and_times():
    plan = cp.ExternalPlan(
        1,
        0,
        "during_recovery",
        (
            cp.KillSpec(3.125, "SIGKILL", "worker", 0.5),
            cp.KillSpec(0.4, "SIGKILL", "worker", 0.1, True),
        ),
    )
    assert plan.describe() == "SIGKILL worker @3.12s, SIGKILL worker (replacement) +0.40s"
    fit = cp.ExternalPlan(
        2, 0, "driver", (cp.KillSpec(1.5, "SIGKILL", "driver", 0.0, after=cp.STARTED),)
    )
    assert fit.describe() == "SIGKILL driver @started+1.50s"


def test_kinds_and_campaign_checks_say_what_is_wrong():
    assert cp.kinds_from_text(None) == cp.KINDS
    assert cp.kinds_from_text("driver, stop") == ("driver", "stop")
    with pytest.raises(ConfigError, match="unknown kind.*'bogus'.*valid kinds are worker"):
        cp.kinds_from_text("worker,bogus")
    with pytest.raises(
        ConfigError, match="needs at least 3 workers \\(-n 4 or more\\); found 2 \\(-n 3\\)"
    ):
        cp.check_campaign(2, 5, 1.0, cp.KINDS)
    cp.check_campaign(2, 5, 1.0, ("worker", "stop", "driver"))  # one victim at a time: 2 workers do
    with pytest.raises(ConfigError, match="--runs must be >= 1; found 0"):
        cp.check_campaign(3, 0, 1.0, cp.KINDS)
    with pytest.raises(ConfigError, match="--kill-window"):
        cp.check_campaign(3, 1, 0.0, cp.KINDS)
    with pytest.raises(ConfigError, match="unknown external kind"):
        cp.external_plan(0, 1, 0, "single", 1.0)


# -- process tables, as measured (see the module doc of chaos/external_plan) ---------------------------
PY = "/venv/bin/python"
FIT = (PY, "-m", "mixle_mpi", "fit", "--out-dir", "/runs/run-001")


def _p(pid, ppid, argv, env=None, state="S"):
    return cp.Proc(pid, ppid, state, tuple(argv), env or {})


def openmpi_table() -> dict:
    """A launcher (100) with its reaper, prterun and 4 ranks, and a respawned rank."""
    rows = [
        _p(1, 0, ["/sbin/init"]),
        _p(100, 1, [PY, "-m", "mixle_mpi", "fit", "-n", "4"]),
        _p(101, 100, [PY, "-m", "mixle_mpi.launch.reaper", TAG]),
        _p(102, 100, ["/venv/bin/prterun", "--with-ft", "ulfm"], {"MIXLE_MPI_JOB_TAG": TAG}),
        *[
            _p(
                110 + r,
                102,
                FIT,
                {
                    "MIXLE_MPI_JOB_TAG": TAG,
                    "OMPI_COMM_WORLD_RANK": str(r),
                    "PMIX_RANK": str(r),
                    "PMIX_NAMESPACE": "prterun-vm-102@1",
                },
            )
            for r in range(4)
        ],
        _p(
            120,
            102,
            FIT,
            {
                "MIXLE_MPI_JOB_TAG": TAG,
                "OMPI_COMM_WORLD_RANK": "0",
                "PMIX_RANK": "0",
                "OMPI_PARENT_PORT": "1231421441.0:2137227106",
                "PMIX_NAMESPACE": "prterun-vm-102@2",
            },
        ),
        _p(
            200, 1, FIT, {"OMPI_COMM_WORLD_RANK": "1"}
        ),  # another job's rank: not under the launcher, no tag
    ]
    return {p.pid: p for p in rows}


def mpich_table() -> dict:
    """Hydra: each rank is ``sh rankwrap.sh python ...`` with python as its child; rank 3's
    wrapper has just forked (its child is still ``sh``); a respawned rank runs under
    ``rankwrap.sh --worker`` with PMI_SPAWNED=1."""
    wrap = ("sh", "/pkg/mixle_mpi/rankwrap.sh")
    env = lambda r, **kw: {"MIXLE_MPI_JOB_TAG": TAG, "PMI_RANK": str(r), "PMI_SIZE": "4", **kw}  # noqa: E731
    rows = [
        _p(100, 1, [PY, "-m", "mixle_mpi", "fit", "-n", "4"]),
        _p(101, 100, [PY, "-m", "mixle_mpi.launch.reaper", TAG]),
        _p(102, 100, ["/venv/bin/mpiexec", "-disable-auto-cleanup"], {"MIXLE_MPI_JOB_TAG": TAG}),
        _p(
            103,
            102,
            ["/venv/bin/hydra_pmi_proxy", "--control-port", "vm:1"],
            {"MIXLE_MPI_JOB_TAG": TAG},
        ),
        *[_p(110 + r, 103, [*wrap, *FIT], env(r)) for r in range(4)],
        *[_p(130 + r, 110 + r, FIT, env(r)) for r in range(3)],
        _p(133, 113, [*wrap, *FIT], env(3)),  # forked, not yet exec'd
        _p(140, 103, [*wrap, "--worker", *FIT], env(0, PMI_SPAWNED="1")),
        _p(141, 140, FIT, env(0, PMI_SPAWNED="1")),
    ]
    return {p.pid: p for p in rows}


def test_classify_openmpi_tells_driver_workers_and_respawned_apart():
    ranks = {r.pid: r for r in cp.classify(openmpi_table(), 100)}
    assert sorted(ranks) == [
        110,
        111,
        112,
        113,
        120,
    ]  # not the reaper, prterun, or another job's rank
    assert ranks[110].role == "driver" and not ranks[110].respawned
    assert [ranks[p].role for p in (111, 112, 113)] == ["worker"] * 3 and [
        ranks[p].rank for p in (111, 112, 113)
    ] == [1, 2, 3]
    assert (
        ranks[120].role == "worker" and ranks[120].respawned and ranks[120].rank == 0
    )  # rank 0 of its own world
    assert all(r.tag == TAG and r.wrapper is None for r in ranks.values())


def test_classify_mpich_picks_the_python_child_never_the_wrapper():
    ranks = {r.pid: r for r in cp.classify(mpich_table(), 100)}
    assert sorted(ranks) == [130, 131, 132, 141]  # rank 3 has no python yet; no sh is a rank
    assert ranks[130].role == "driver" and ranks[130].wrapper == 110
    assert [ranks[p].role for p in (131, 132)] == ["worker", "worker"]
    assert ranks[141].role == "worker" and ranks[141].respawned and ranks[141].wrapper == 140


def test_classify_respawned_by_wrapper_flag_alone_and_reparented_ranks_by_tag():
    table = mpich_table()
    table[141] = _p(
        141, 140, FIT, {"MIXLE_MPI_JOB_TAG": TAG, "PMI_RANK": "0"}
    )  # no PMI_SPAWNED: --worker says it
    assert {r.pid: r.role for r in cp.classify(table, 100)}[141] == "worker"
    table = openmpi_table()
    table[112] = cp.Proc(112, 1, "S", table[112].argv, table[112].env)  # reparented to init
    assert 112 not in {r.pid for r in cp.classify(table, 100)}
    assert 112 in {r.pid for r in cp.classify(table, 100, {TAG})}


def test_descendants_parents_first():
    assert cp.descendants(openmpi_table(), 102) == [110, 111, 112, 113, 120]
    assert cp.descendants(openmpi_table(), 100)[:2] == [101, 102]


# -- victims ----------------------------------------------------------------------------------
def _ranks(states=None):
    states = states or {}
    out = [cp.RankProc(10, "driver", 0, False, states.get(10, "S"))]
    out += [cp.RankProc(10 + r, "worker", r, False, states.get(10 + r, "R")) for r in (1, 2, 3)]
    out.append(cp.RankProc(50, "worker", 0, True, states.get(50, "S")))
    return out


def test_choose_victim_is_deterministic_over_live_workers_of_the_target_role():
    kill = lambda pick, **kw: cp.KillSpec(1.0, "SIGKILL", "worker", pick, **kw)  # noqa: E731
    assert cp.choose_victim(_ranks(), kill(0.0)).pid == 11
    assert cp.choose_victim(_ranks(), kill(0.99)).pid == 50  # respawned ones sort last
    assert (
        cp.choose_victim(list(reversed(_ranks())), kill(0.5)).pid
        == cp.choose_victim(_ranks(), kill(0.5)).pid
    )
    assert cp.choose_victim(_ranks({11: "Z"}), kill(0.0)).pid == 12  # a zombie is no victim
    assert cp.choose_victim(_ranks(), kill(0.0), {11, 12}).pid == 13  # nor one this run hit already
    assert cp.choose_victim(_ranks(), kill(0.0, prefer_replacement=True)).pid == 50
    assert (
        cp.choose_victim(_ranks(), kill(0.0, prefer_replacement=True), {50}).pid == 11
    )  # none left: any worker
    assert cp.choose_victim(_ranks(), cp.KillSpec(0.0, "SIGKILL", "driver", 0.7)).pid == 10
    assert cp.choose_victim(_ranks(), kill(0.0), {11, 12, 13, 50}) is None
    assert cp.choose_victim([], kill(0.3)) is None
    stop = cp.KillSpec(1.0, "SIGSTOP", "worker", 0.0)
    assert cp.choose_victim(_ranks({11: "T"}), stop).pid == 12  # SIGSTOP never picks a stopped rank
    assert cp.choose_victim(_ranks({11: "T"}), kill(0.0)).pid == 11  # SIGKILL may


def test_never_started_is_explained_only_if_every_attempt_lost_a_rank():
    assert cp.never_started_explained(["a"], 1)
    assert not cp.never_started_explained(["a"], 2)
    assert not cp.never_started_explained(["a", "a"], 2)  # both victims in the first attempt
    assert cp.never_started_explained(["a", "b"], 2)
    assert not cp.never_started_explained([None], 1)


# -- outcomes ---------------------------------------------------------------------------------
def L(
    code,
    *,
    diffs=(),
    result=True,
    hung=False,
    leftovers=(),
    retried=False,
    relaunched=False,  # noqa: N802
    taken_over=False,
):
    return cp.Launch(
        code, 5.0, hung, result, list(diffs), list(leftovers), retried, relaunched, taken_over
    )


@pytest.mark.parametrize(
    "kind, first, kw, expected",
    [
        ("worker", L(0), {}, "ok"),
        ("worker", L(0, retried=True), {}, "never-started-retried"),
        ("worker", L(0, diffs=["model.json differs"]), {}, "DIVERGED"),
        ("worker", L(0, result=False), {}, "FAILED(0)"),
        ("worker", L(1, result=False), {}, "FAILED(1)"),
        ("worker", L(70), {}, "FAILED(70)"),
        ("worker", L(None, hung=True, result=False), {}, "HUNG"),
        ("worker", L(0, leftovers=[{"pid": 5}]), {}, "LEFTOVER"),
        ("worker", L(0), {"missed": True}, "missed"),
        (
            "worker",
            L(1),
            {"missed": True},
            "FAILED(1)",
        ),  # a failure is never hidden by a missed kill
        ("worker", L(0, diffs=["x"]), {"missed": True}, "DIVERGED"),
        ("stop", L(73, result=False), {}, "FAILED(73)"),  # unexplained: nothing disturbed the retry
        (
            "two_workers",
            L(73, result=False),
            {"explained_73": True, "rerun": L(0)},
            "never-started-retried",
        ),
        (
            "two_workers",
            L(73, result=False),
            {"explained_73": True, "rerun": L(0, diffs=["x"])},
            "DIVERGED",
        ),
        (
            "two_workers",
            L(73, result=False),
            {"explained_73": True, "rerun": L(73, result=False)},
            "FAILED(73)",
        ),
        ("driver", L(137, result=False), {"rerun": L(0)}, "resumed-ok"),
        ("driver", L(70, result=False), {"rerun": L(0, diffs=["x"])}, "DIVERGED"),
        ("driver", L(70, result=False), {"rerun": L(1, result=False)}, "FAILED(1)"),
        ("driver", L(70, result=False), {"rerun": L(None, hung=True)}, "HUNG"),
        ("driver", L(70, result=False), {"rerun": L(0, leftovers=[{"pid": 9}])}, "LEFTOVER"),
        ("driver", L(70, result=False, leftovers=[{"pid": 9}]), {"rerun": L(0)}, "LEFTOVER"),
        (
            "driver",
            L(70, result=False),
            {},
            "FAILED(70)",
        ),  # a driver kill must be followed by a rerun
        ("driver", L(0, retried=True), {}, "never-started-retried"),
        ("driver", L(73, result=False), {"rerun": L(0)}, "FAILED(73)"),
        (
            "during_recovery",
            L(0, relaunched=True),
            {},
            "relaunched-resumed",
        ),  # exit 74, then the launcher's rerun
        ("during_recovery", L(0, relaunched=True, diffs=["x"]), {}, "DIVERGED"),
        (
            "during_recovery",
            L(74, result=False),
            {},
            "FAILED(74)",
        ),  # the launcher's rerun failed too
        (
            "driver",
            L(0, taken_over=True),
            {},
            "taken-over",
        ),  # failover: a survivor drove on, same job
        ("driver", L(0, taken_over=True, diffs=["x"]), {}, "DIVERGED"),
        # a live worker taken for dead (issue 37: two killed, four places failed) fails the run
        ("two_workers", L(0), {"failed_places": 4, "killed": 2}, "EXTRA-FAILURES"),
        ("two_workers", L(0), {"failed_places": 2, "killed": 2}, "ok"),
        ("worker", L(0, retried=True), {"failed_places": 0, "killed": 1}, "never-started-retried"),
        ("worker", L(0, diffs=["x"]), {"failed_places": 3, "killed": 1}, "DIVERGED"),
    ],
)
def test_judge(kind, first, kw, expected):
    kw = {"missed": False, "explained_73": False, **kw}
    assert cp.judge(kind, first, **kw) == expected
    assert cp.passed(expected) == (
        expected
        in (
            "ok",
            "resumed-ok",
            "never-started-retried",
            "relaunched-resumed",
            "taken-over",
            "missed",
        )
    )


def test_needs_rerun_only_after_an_explained_exit():
    assert cp.needs_rerun("driver", L(137), False)
    assert not cp.needs_rerun("driver", L(0), False)
    assert not cp.needs_rerun("driver", L(None, hung=True), False)
    assert not cp.needs_rerun("worker", L(1), False)
    assert cp.needs_rerun("worker", L(73), True) and not cp.needs_rerun("worker", L(73), False)
    assert not cp.needs_rerun("driver", L(73), False)


# -- phases and the report --------------------------------------------------------------------
EVENTS = [
    {"time": 10.0, "event": "start"},
    {"time": 11.0, "event": "checkpoint", "iteration": 1},
    {"time": 11.5, "event": "failure_detected", "pid": 3},
    {"time": 12.0, "event": "checkpoint", "iteration": 2},
    {"time": 13.0, "event": "checkpoint", "iteration": 2, "finished": True},
    {"time": 13.1, "event": "closed"},
]


@pytest.mark.parametrize(
    "wall, phase",
    [
        (5.0, "startup"),
        (10.5, "setup"),
        (11.2, "it 2"),
        (12.5, "it 3"),
        (13.05, "close"),
        (14.0, "close"),
    ],
)
def test_phase_at(wall, phase):
    assert cp.phase_at(wall, EVENTS) == phase
    assert cp.phase_at(wall, []) == "startup"


@pytest.mark.parametrize(
    "wall, mpi_up, started, phase",
    [
        (5.0, False, False, "start/init"),
        (5.0, True, False, "handshake"),
        (10.5, True, False, "shard load"),
        (10.5, True, True, "it 1"),
        (11.2, True, True, "it 2"),
    ],
)
def test_phase_at_with_the_launchers_startup_markers(wall, mpi_up, started, phase):
    assert cp.phase_at(wall, EVENTS, mpi_up, started) == phase


def test_a_run_without_checkpoints_names_its_fit_phase_fit():
    """No checkpoint, no iteration in the event log: a kill in the fit is in ``fit``."""
    events = [{"time": 10.0, "event": "start"}, {"time": 13.1, "event": "closed"}]
    assert cp.phase_at(11.0, events, True, True, checkpoints=False) == "fit"
    assert cp.phase_at(11.0, events, True, False, checkpoints=False) == "shard load"
    assert cp.phase_at(13.5, events, True, True, checkpoints=False) == "close"


def test_phase_after_a_resume_counts_from_the_resumed_iteration():
    events = [{"time": 1.0, "event": "start"}, {"time": 2.0, "event": "resumed", "iteration": 7}]
    assert cp.phase_at(2.5, events) == "it 8"


def test_percentiles_and_summary():
    assert cp.percentile([], 50) is None
    assert cp.percentile([3.0, 1.0, 2.0, None], 50) == 2.0
    assert cp.percentile([1.0, 2.0], 90) == pytest.approx(1.9)
    rows = [
        {
            "kind": "worker",
            "outcome": "ok",
            "recovery_seconds": 1.0,
            "kills": [{"delivered": True, "phase": "it 3"}],
        },
        {
            "kind": "worker",
            "outcome": "missed",
            "recovery_seconds": None,
            "kills": [{"missed": True}],
        },
        {
            "kind": "worker",
            "outcome": "ok",
            "recovery_seconds": 3.0,
            "kills": [{"delivered": True, "phase": "startup"}],
        },
        {
            "kind": "driver",
            "outcome": "resumed-ok",
            "recovery_seconds": None,
            "kills": [{"delivered": True, "phase": "it 9"}],
        },
    ]
    s = cp.summarize(rows, ("worker", "driver"))
    assert s["runs"] == 3 and s["missed"] == 1 and s["runs_per_kind"] == {"worker": 2, "driver": 1}
    assert s["per_kind"]["worker"] == {"ok": 2, "missed": 1} and s["failures"] == 0 and s["ok"]
    assert (
        s["recovery_seconds"]["n"] == 2
        and s["recovery_seconds"]["p50"] == 2.0
        and s["recovery_seconds"]["max"] == 3.0
    )
    assert s["kills_per_phase"] == {"fit": 2, "startup": 1}
    rows.append({"kind": "driver", "outcome": "LEFTOVER", "recovery_seconds": None, "kills": []})
    s = cp.summarize(rows, ("worker", "driver"))
    assert not s["ok"] and s["failures"] == 1 and s["outcomes"]["LEFTOVER"] == 1
    assert not cp.summarize([rows[1]], ("worker",))["ok"]  # nothing but missed draws proves nothing


# -- the watcher, against fake ranks (plain processes, no MPI) -----------------------------------
FAKE_LAUNCHER = r"""
import os, subprocess, sys, time
tag, seconds = sys.argv[1], sys.argv[2]
procs = [subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"],
                          env={**os.environ, "MIXLE_MPI_JOB_TAG": tag, "OMPI_COMM_WORLD_RANK": str(r)})
         for r in range(4)]
codes = [p.wait() for p in procs]
print("codes", codes, flush=True)
sys.exit(0 if codes[0] == 0 else 1)
"""


def test_watch_kills_the_chosen_worker_from_outside_and_records_it(tmp_path):
    from mixle_mpi.chaos.external import watch

    script = tmp_path / "fake_launcher.py"
    script.write_text(FAKE_LAUNCHER)
    kills = (cp.KillSpec(0.8, "SIGKILL", "worker", 0.0), cp.KillSpec(0.1, "SIGKILL", "worker", 0.0))
    seen = watch(
        [sys.executable, str(script), TAG, "4"],
        dict(os.environ),
        str(tmp_path / "job.log"),
        kills,
        60,
        1,
    )
    assert seen.code == 0 and not seen.hung, (tmp_path / "job.log").read_text()
    assert [(k["role"], k["rank"], k["delivered"]) for k in seen.kills] == [
        ("worker", 1, True),
        ("worker", 2, True),
    ]
    assert 0.8 <= seen.kills[0]["at"] < 1.5 and seen.kills[1]["at"] - seen.kills[0]["at"] >= 0.1
    assert seen.tags == [TAG] and {r.rank for r in seen.ranks.values()} == {0, 1, 2, 3}
    assert "codes [0, -9, -9, 0]" in (tmp_path / "job.log").read_text()


STARTED_LAUNCHER = r"""
import os, subprocess, sys, time
tag, marker, after = sys.argv[1], sys.argv[2], float(sys.argv[3])
env = {**os.environ, "MIXLE_MPI_JOB_TAG": tag, "MIXLE_MPI_STARTED_FILE": marker}
procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(4)"],
                          env={**env, "OMPI_COMM_WORLD_RANK": str(r)}) for r in range(4)]
if after >= 0:
    time.sleep(after)
    open(marker, "w").write("{}")
codes = [p.wait() for p in procs]
print("codes", codes, flush=True)
"""


@pytest.mark.parametrize("marker_after", [1.2, -1])
def test_watch_times_a_fit_draw_from_the_started_marker(tmp_path, marker_after):
    from mixle_mpi.chaos.external import watch

    script = tmp_path / "fake_launcher.py"
    script.write_text(STARTED_LAUNCHER)
    kills = (cp.KillSpec(0.5, "SIGKILL", "worker", 0.0, after=cp.STARTED),)
    seen = watch(
        [sys.executable, str(script), TAG, str(tmp_path / "started"), str(marker_after)],
        dict(os.environ),
        str(tmp_path / "job.log"),
        kills,
        60,
        1,
    )
    assert seen.code == 0 and len(seen.kills) == 1, (tmp_path / "job.log").read_text()
    if marker_after < 0:  # the marker never came: the kill never came either
        assert seen.started_at is None and seen.kills[0]["missed"]
        assert seen.kills[0]["why"] == "the job ended before its started marker"
        return
    assert 1.2 <= seen.started_at < 2.0 and seen.started_files == [str(tmp_path / "started")]
    k = seen.kills[0]
    assert k["delivered"] and k["after"] == cp.STARTED and k["started"] is True
    assert seen.started_at + 0.5 <= k["at"] < seen.started_at + 1.0
    assert "codes [0, -9, 0, 0]" in (tmp_path / "job.log").read_text()


def test_watch_records_a_kill_after_the_end_as_missed(tmp_path):
    from mixle_mpi.chaos.external import watch

    script = tmp_path / "fake_launcher.py"
    script.write_text(FAKE_LAUNCHER)
    seen = watch(
        [sys.executable, str(script), TAG, "0.2"],
        dict(os.environ),
        str(tmp_path / "job.log"),
        (cp.KillSpec(30.0, "SIGKILL", "driver", 0.0),),
        60,
        1,
    )
    assert seen.code == 0 and len(seen.kills) == 1
    assert seen.kills[0]["missed"] and seen.kills[0]["why"] == "the job had ended"


def _wait_exec(*procs, deadline: float = 30.0) -> None:
    """Until each child has exec'd its command (a forked child shows its parent's command
    line for a moment, which a loaded machine makes long)."""
    end = time.monotonic() + deadline
    for p in procs:
        while b"time.sleep(60)" not in Path(f"/proc/{p.pid}/cmdline").read_bytes():
            assert time.monotonic() < end, f"pid {p.pid} did not start its command"
            time.sleep(0.01)


def test_leftovers_are_found_by_tag_only_then_killed(tmp_path):
    """A process that only names the run's folder (a user's ``tail -f`` of its log) is not the
    job's: it was killed as a leftover before (issue 33), never now."""
    from mixle_mpi.chaos.external import job_processes, wait_gone

    folder = str(tmp_path / "run-001")
    by_tag = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, "MIXLE_MPI_JOB_TAG": TAG},
    )
    by_dir = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "--out-dir", folder]
    )
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", folder + "-d1"])
    try:
        _wait_exec(by_tag, by_dir, other)
        found = {p["pid"] for p in job_processes([TAG])}
        assert found == {by_tag.pid}
        t0 = time.monotonic()
        left = wait_gone([TAG], 0.5)
        assert {p["pid"] for p in left} == {by_tag.pid} and time.monotonic() - t0 < 5
        assert by_tag.wait(timeout=10) == -9
        assert by_dir.poll() is None and other.poll() is None  # not the job's: untouched
        assert wait_gone([TAG], 5.0) == []
    finally:
        for p in (by_tag, by_dir, other):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_table_row_shows_victims_phases_exit_and_leftovers():
    from mixle_mpi.chaos.external import HEADER, table_row

    row = {
        "index": 7,
        "draw": 1,
        "kind": "driver",
        "exit_code": 137,
        "outcome": "resumed-ok",
        "identical": True,
        "diffs": [],
        "recovery_seconds": None,
        "wall_seconds": 12.34,
        "leftovers": [],
        "rerun": {"exit_code": 0, "leftovers": [{"pid": 1}]},
        "kills": [
            {
                "signal": "SIGKILL",
                "role": "driver",
                "rank": 0,
                "respawned": False,
                "pid": 5,
                "at": 4.5,
                "phase": "it 12",
                "delivered": True,
            }
        ],
    }
    line = table_row(row)
    assert line.split() == [
        "7.1",
        "driver",
        "KILL",
        "driver",
        "@4.50s",
        "(it",
        "12)",
        "137/0",
        "resumed-ok",
        "yes",
        "-",
        "12.3",
        "1",
    ]
    assert HEADER.split() == [
        "run",
        "kind",
        "victims",
        "exit",
        "outcome",
        "identical",
        "recovery",
        "s",
        "wall",
        "s",
        "left",
    ]
    row.update(
        kind="during_recovery",
        exit_code=0,
        rerun=None,
        outcome="missed",
        identical=False,
        kills=[
            {
                "signal": "SIGKILL",
                "role": "worker",
                "rank": 0,
                "respawned": True,
                "worker": 2,
                "pid": 9,
                "at": 1.0,
                "phase": "shard load",
                "delivered": True,
            },
            {"signal": "SIGKILL", "target": "worker", "missed": True, "why": "no live candidate"},
        ],
    )
    assert "KILL w2* @1.00s (shard load); KILL missed (no live candidate)" in table_row(row)


def test_cli_refuses_an_external_campaign_it_cannot_run(tmp_path, capsys):
    from mixle_mpi.cli.commands import main

    assert main(["chaos", "--external", "-n", "3", "--out-dir", str(tmp_path)]) == 2
    assert "needs at least 3 workers (-n 4 or more); found 2 (-n 3)" in capsys.readouterr().err
    assert main(["chaos", "--external", "--kinds", "worker,nope", "--out-dir", str(tmp_path)]) == 2
    assert "unknown kind(s) ['nope']" in capsys.readouterr().err
    assert not os.listdir(tmp_path)  # refused before any launch


def test_kill_records_the_launchers_startup_markers_as_they_were(tmp_path):
    from mixle_mpi.chaos.external import _markers
    from mixle_mpi.launch.contract import MPI_UP_ENV, STARTED_ENV

    up, started = tmp_path / "mpi_up.json", tmp_path / "started.json"
    up.write_text("{}")
    assert _markers({MPI_UP_ENV: str(up), STARTED_ENV: str(started)}) == {
        "mpi_up": True,
        "started": False,
    }
    assert _markers({}) == {"mpi_up": None, "started": None}


def _bench():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "chaos_campaign.py"
    spec = importlib.util.spec_from_file_location("bench_chaos_campaign", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_report_labels_a_smoke_run_and_shows_counts_phases_and_percentiles():
    bench = _bench()
    rows = [
        {
            "index": 1,
            "draw": 0,
            "kind": "worker",
            "plan": "SIGKILL worker @1.00s",
            "outcome": "ok",
            "exit_code": 0,
            "wall_seconds": 9.0,
            "leftovers": [],
            "recovery_seconds": 1.5,
            "kills": [{"delivered": True, "phase": "it 4"}],
        },
        {
            "index": 2,
            "draw": 0,
            "kind": "stop",
            "plan": "SIGSTOP worker @0.50s",
            "outcome": "HUNG",
            "exit_code": 1,
            "replay": "--replay 2",
            "wall_seconds": 120.0,
            "leftovers": [],
            "recovery_seconds": None,
            "kills": [{"delivered": True, "phase": "start/init"}],
        },
    ]
    ext = {
        "summary": cp.summarize(rows, ("worker", "stop")),
        "runs": rows,
        "reference_seconds": 9.5,
        "kill_window_seconds": 9.5,
        "run_timeout": 155.0,
        "leftover_seconds": 10.0,
        "env": {"MIXLE_MPI_STARTUP_TIMEOUT": "20"},
    }
    plans = bench.plan_summary(
        {
            "runs": [{"kind": "single", "outcome": "ok", "recovery_seconds": 2.0}],
            "planned_faults": 1,
            "fired_faults": 1,
            "ok": True,
        }
    )
    assert plans["runs"] == 1 and plans["failures"] == 0 and plans["recovery_seconds"]["p50"] == 2.0
    results = {
        "smoke": True,
        "runs": 2,
        "seed": 4,
        "ranks": 4,
        "max_its": 100,
        "date": "d",
        "host": "h",
        "cpus": 2,
        "command": "python bench/chaos_campaign.py --runs 2",
        "libraries": {
            "openmpi": {
                "work": "/w",
                "commands_shown": {"external": "EXT", "fault_plans": "FP"},
                "external": ext,
                "external_exit": 1,
                "fault_plans": plans,
                "fault_plans_exit": 0,
            }
        },
    }
    text = bench.render(results)
    assert (
        text.startswith("# Chaos campaign (SMOKE RUN)")
        and "**This is a smoke run** (2 external runs" in text
    )
    assert "seed 4" in text and "    EXT" in text and "    FP" in text
    assert "| kind | runs | HUNG | ok |" in text and "| worker | 2 | 0 | 1 |" not in text
    assert "| worker | 1 | 0 | 1 |" in text and "| stop | 1 | 1 | 0 |" in text
    assert "fit 1, start/init 1" in text and "| all kinds | 1 | 1.50 | 1.50 | 1.50 | 1.50 |" in text
    assert "| 2.0 | stop | SIGSTOP worker @0.50s | HUNG | 1 | 120.0 | 0 | `--replay 2` |" in text
    assert "1/1 planned faults fired" in text
    assert "SMOKE" not in bench.render({**results, "smoke": False})
    assert "kill times uniform over [0, 9.5] s after the launch" in text and "PARTIAL" not in text
    fitted = {
        **ext,
        "fit_share": 0.75,
        "fit_window_seconds": 6.25,
        "reference_started_seconds": 3.25,
        "partial": True,
        "slots_done": 2,
        "slots_planned": 200,
    }
    text = bench.render(
        {
            **results,
            "libraries": {"openmpi": {**results["libraries"]["openmpi"], "external": fitted}},
        }
    )
    assert (
        "first kills: 75% of the draws (seeded) uniform over the fit, [0, 6.2] s after the run's own started "
        "marker (the reference's fit: from its marker at 3.2 s to its end), the others uniform over [0, 9.5] s "
        "after the launch"
    ) in text
    assert "**PARTIAL**: the external campaign was stopped after 2 of its 200 run slots" in text
    assert (
        text.startswith("# Chaos campaign (SMOKE RUN) (PARTIAL)")
        and "openmpi: 2 of 200 slots" in text
    )


@pytest.mark.parametrize(
    "log, attempts",
    [
        ("[mixle_mpi] launching: mpiexec -n 4 x\n[mixle_mpi] done\n", 1),
        (
            "[mixle_mpi] 03:20:37 launching: mpiexec\n[mixle_mpi] 03:21:00 warning: the job never started: ...; starting it "
            "again (attempt 2 of 2)\n[mixle_mpi] 03:21:00 launching: mpiexec\n",
            2,
        ),
        (
            "[mixle_mpi] the job never started: x; starting it again (attempt 2 of 2)\n",
            2,
        ),  # launch lines at -q
        ("", 1),
    ],
)
def test_attempts_are_counted_from_the_launchers_log_in_any_format(log, attempts):
    from mixle_mpi.chaos.external import _attempts

    assert _attempts(log) == attempts


def test_replay_gives_a_run_the_kills_it_had_in_its_campaign():
    kinds = cp.kinds_from_text("worker,driver,stop")
    plans = cp.campaign_plans(11, 9, 7.5, kinds)
    assert cp.parse_replay("5, 8.2,") == [(5, 0), (8, 2)]
    assert cp.replay_plans(11, [(5, 0), (8, 2)], 7.5, kinds) == [
        plans[4],
        cp.external_plan(11, 8, 2, plans[7].kind, 7.5),
    ]
    assert cp.parse_replay(None) == [] and cp.parse_replay("") == []
    for bad in ("0", "x", "3.x", "-1", "2.1.1"):
        with pytest.raises(ConfigError, match="--replay takes runs as RUN or RUN.DRAW"):
            cp.parse_replay(bad)


def test_event_log_cut_by_a_killed_driver_keeps_the_other_lines(tmp_path):
    from mixle_mpi.chaos.external import _events

    (tmp_path / "events.jsonl").write_text(
        '{"event": "start", "time": 1}\n{"event": "checkp\n'
        '{"event": "resumed", "time": 3, "iteration": 4}\n'
    )
    assert [e["event"] for e in _events(str(tmp_path))] == ["start", "resumed"]
    assert _events(str(tmp_path / "nothing")) == []


def test_a_kill_aimed_at_the_replacement_waits_for_it_within_the_recovery_window():
    spec = cp.KillSpec(0.3, "SIGKILL", "worker", 0.0, prefer_replacement=True)
    originals = [r for r in _ranks() if not r.respawned]
    assert cp.choose_victim(originals, spec, hold_for_replacement=True) is None  # not up yet: wait
    assert (
        cp.choose_victim(originals, spec, hold_for_replacement=False).pid == 11
    )  # window over: any worker
    assert (
        cp.choose_victim(_ranks(), spec, hold_for_replacement=True).pid == 50
    )  # up: it is the victim
    plain = cp.KillSpec(0.3, "SIGKILL", "worker", 0.0)
    assert (
        cp.choose_victim(originals, plain, hold_for_replacement=True).pid == 11
    )  # only for replacement kills


FAKE_RESPAWNING_LAUNCHER = r"""
import os, subprocess, sys, time
tag = sys.argv[1]
env = lambda **kw: {**os.environ, "MIXLE_MPI_JOB_TAG": tag, **kw}
sleep = [sys.executable, "-c", "import time; time.sleep(6)"]
procs = [subprocess.Popen(sleep, env=env(OMPI_COMM_WORLD_RANK=str(r))) for r in range(4)]
procs[1].wait()                       # worker 1 dies: "respawn" it 0.6 s later, as rank 0 of a world of its own
time.sleep(0.6)
repl = subprocess.Popen(sleep, env=env(OMPI_COMM_WORLD_RANK="0", OMPI_PARENT_PORT="1.0:2"))
print("replacement", repl.pid, flush=True)
print("codes", [p.wait() for p in procs], repl.wait(), flush=True)
"""


def test_watch_kills_the_replacement_the_moment_it_appears(tmp_path):
    from mixle_mpi.chaos.external import watch

    script = tmp_path / "fake_launcher.py"
    script.write_text(FAKE_RESPAWNING_LAUNCHER)
    kills = (
        cp.KillSpec(0.8, "SIGKILL", "worker", 0.0),
        cp.KillSpec(0.2, "SIGKILL", "worker", 0.9, True),
    )
    seen = watch(
        [sys.executable, str(script), TAG],
        dict(os.environ),
        str(tmp_path / "job.log"),
        kills,
        60,
        1,
    )
    log = (tmp_path / "job.log").read_text()
    assert seen.code == 0, log
    first, second = seen.kills
    assert (first["rank"], second["respawned"]) == (1, True), seen.kills
    assert f"replacement {second['pid']}" in log and log.rstrip().endswith(
        "-9"
    )  # it was killed, from outside
    assert (
        0.5 <= second["at"] - first["at"] < cp.RECOVERY_GAP[1]
    )  # when it appeared, not at the drawn +0.2 s


# -- the "host" kind: a simulated host lost at once -----------------------------------------------
def _worker(pid, rank, respawned=False, state="S"):
    return cp.RankProc(pid, "worker", rank, respawned, state)


def test_hosts_are_blocks_of_consecutive_ranks_with_the_driver_alone():
    assert [cp.host_of(r) for r in range(7)] == [0, 1, 1, 2, 2, 3, 3]


def test_a_lost_host_takes_every_live_original_worker_on_it():
    ranks = [
        cp.RankProc(10, "driver", 0, False, "S"),
        _worker(11, 1),
        _worker(12, 2),
        _worker(13, 3),
        _worker(14, 4),
        _worker(15, 0, respawned=True),
    ]
    spec = cp.KillSpec(1.0, "SIGKILL", "host", 0.0)
    assert [v.pid for v in cp.choose_host(ranks, spec)] == [11, 12]
    assert [v.pid for v in cp.choose_host(ranks, cp.KillSpec(1.0, "SIGKILL", "host", 0.99))] == [
        13,
        14,
    ]
    assert [v.pid for v in cp.choose_host(ranks, spec, done={11})] == [12]  # one already gone
    dead = [_worker(11, 1, state="Z"), _worker(12, 2, state="Z"), _worker(15, 0, respawned=True)]
    assert cp.choose_host(dead, spec) == []  # a replacement is on no simulated host


def test_the_host_kind_is_opt_in_and_needs_a_survivor_host():
    assert "host" not in cp.KINDS and cp.kinds_from_text("host,worker") == ("host", "worker")
    plan = cp.external_plan(5, 1, 0, "host", 10.0)
    assert [(k.signal, k.target) for k in plan.kills] == [("SIGKILL", "host")]
    cp.check_campaign(cp.HOST_SIZE + 1, 1, 1.0, ("host",))
    with pytest.raises(ConfigError, match="at least 3 workers"):
        cp.check_campaign(cp.HOST_SIZE, 1, 1.0, ("host",))


def test_only_a_campaign_that_kills_the_driver_writes_checkpoints():
    """A killed driver's run must resume, so it needs a checkpoint; worker kills run as a fit
    does by default, without one, so that the E-step computed ahead (off while checkpoints
    are written) and its statistics sent ahead are killed into as well."""
    from mixle_mpi.chaos import external_plan as cp

    assert cp.checkpoints(cp.KINDS)
    assert cp.checkpoints(("worker", "driver"))
    assert not cp.checkpoints(("worker", "two_workers", "during_recovery", "stop", "host"))


def test_the_start_window_reaches_just_past_the_references_started_marker():
    assert cp.window_from_text("start") == cp.START_WINDOW == cp.window_from_text(" Start ")
    assert cp.window_from_text("0.5") == 0.5
    for bad in ("0", "-1", "nan", "inf", "soon"):
        with pytest.raises(ConfigError, match="--kill-window must be a factor > 0 .* or 'start'"):
            cp.window_from_text(bad)
    assert cp.start_span(4.0) == (4.0 - cp.START_BEFORE, 4.0 + cp.START_PAST)
    assert cp.start_span(1.0) == (0.0, 1.0 + cp.START_PAST)
    with pytest.raises(ConfigError, match="started marker.*--kill-window-seconds"):
        cp.start_span(None)
    cp.check_campaign(4, 40, cp.START_WINDOW, ("worker", "two_workers"))  # accepted as a window


def test_a_window_that_starts_later_keeps_every_first_kill_inside_it_and_replays():
    plans = cp.campaign_plans(9, 30, 5.0, ("worker", "during_recovery"), None, 0.0, window_from=3.0)
    assert all(3.0 <= p.kills[0].delay <= 5.0 and p.kills[0].after == cp.LAUNCH for p in plans)
    assert cp.replay_plans(9, [(7, 0)], 5.0, ("worker", "during_recovery"), None, 0.0, 3.0) == [
        plans[6]
    ]
    # a campaign without it draws as it always did
    assert cp.campaign_plans(9, 5, 5.0) == cp.campaign_plans(9, 5, 5.0, window_from=0.0)


def test_the_slow_kind_is_opt_in_and_plans_one_duty_cycle_under_the_heartbeat_timeout():
    from mixle_mpi.core.settings import Settings

    assert "slow" not in cp.KINDS and cp.kinds_from_text("slow") == ("slow",)
    plan = cp.external_plan(5, 1, 0, "slow", 10.0)
    assert [(k.signal, k.target) for k in plan.kills] == [(cp.SLOW, "worker")]
    assert cp.DUTY_STOP < Settings().heartbeat_timeout / 2  # stopped, it still beats in time
    assert cp.DUTY_RUN / (cp.DUTY_STOP + cp.DUTY_RUN) == 0.25


def test_watch_slows_the_chosen_worker_in_a_duty_cycle_and_never_leaves_it_stopped(tmp_path):
    """Fake ranks sleep 3 s; worker rank 1 is stopped and continued from 0.5 s on until the
    launcher ends: it ends well (exit 0, not killed), and the record counts its cycles."""
    from mixle_mpi.chaos.external import watch

    script = tmp_path / "fake_launcher.py"
    script.write_text(FAKE_LAUNCHER)
    seen = watch(
        [sys.executable, str(script), TAG, "3"],
        dict(os.environ),
        str(tmp_path / "job.log"),
        (cp.KillSpec(0.5, cp.SLOW, "worker", 0.0),),
        60,
        1,
    )
    assert seen.code == 0 and not seen.hung, (tmp_path / "job.log").read_text()
    [k] = seen.kills
    assert (k["signal"], k["role"], k["rank"], k["delivered"]) == (cp.SLOW, "worker", 1, True)
    assert k["cycles"] >= 3, k
    assert "codes [0, 0, 0, 0]" in (tmp_path / "job.log").read_text()
