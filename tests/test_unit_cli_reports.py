"""Progress lines, chaos plans, the inspector's stories and plot placement (pure parts)."""

from __future__ import annotations

import io
import json
import random

import pytest

from mixle_mpi.chaos import campaign as chaos
from mixle_mpi.chaos.fault_plan import parse_plan
from mixle_mpi.cli import fitcmd, inspector, restartpaths
from mixle_mpi.cli.plot import event_position
from mixle_mpi.core.errors import ConfigError
from mixle_mpi.fitting import progress


def test_progress_line_has_every_field():
    s = progress.Status(
        iteration=3,
        max_its=10,
        ll=-12.5,
        prev_ll=-13.0,
        seconds=0.25,
        recent=(0.2, 0.25, 0.3),
        live=3,
        blacklisted=1,
        recovered=2,
        failed=4,
        checkpointed=True,
    )
    line = progress.format_line(s)
    for part in (
        "it 3/10",
        "ll -12.5",
        "dll +5.000e-01",
        "0.250s/it",
        "3 workers (4 failed, 1 blacklisted)",
        "2 shards recomputed",
        "eta<=0:00:02",
        "checkpointed",
    ):
        assert part in line, line
    assert progress.eta_seconds(s) == pytest.approx(7 * 0.25)
    first = progress.Status(1, 10, -20.0, None, 1.0, (1.0,), 2, 0, 0, restart="2/3")
    assert "dll -" in progress.format_line(first) and progress.format_line(first).startswith(
        "restart 2/3 "
    )
    plain = progress.format_line(first)
    assert "2 workers (0 failed, 0 blacklisted)" in plain
    assert "recomputed" not in plain and "checkpointed" not in plain and "eta" not in plain


def test_no_eta_until_three_iterations_then_the_median_pace():
    """The first iteration also starts the workers and initializes: an ETA from it is wild."""
    slow_start = (30.0, 0.1)
    two = progress.Status(2, 100, -1.0, -2.0, 0.1, slow_start, 3, 0, 0)
    assert progress.eta_seconds(two) is None and "eta" not in progress.format_line(two)
    three = progress.Status(3, 100, -1.0, -2.0, 0.1, slow_start + (0.2,), 3, 0, 0)
    assert progress.eta_seconds(three) == pytest.approx(97 * 0.2)  # the median, not the 30 s start
    assert (
        progress.eta_seconds(progress.Status(100, 100, -1.0, -2.0, 0.1, (0.1,) * 5, 3, 0, 0))
        is None
    )


@pytest.mark.parametrize(
    "lls, max_its, delta, reason",
    [
        ([-3.0, -2.0, -2.0], 10, 1e-9, "converged"),  # stopped below the cap with delta in force
        ([-3.0, -2.0, -1.0], 3, 1e-9, "max_its"),  # still gaining at the cap
        ([-3.0, -2.0, -2.0 + 1e-12], 3, 1e-9, "converged"),  # converged on the cap's iteration
        ([-3.0, -2.0, -2.0], 10, None, "unchanged"),  # delta none: stopped when ll stopped changing
        ([-3.0, -2.0, -1.0], 3, None, "max_its"),
        ([-3.0], 10, 1e-9, "converged"),
    ],
)
def test_stop_reason_from_the_trace(lls, max_its, delta, reason):
    assert progress.stop_reason(lls, max_its, delta) == reason


@pytest.mark.parametrize(
    "iteration, gain, max_its, delta, last",
    [
        (5, 1.0, 10, 1e-9, False),  # still gaining: EM goes on, the step is checkpointed
        (10, 1.0, 10, 1e-9, True),  # the cap
        (5, 3e-10, 10, 1e-9, True),  # converged
        (5, 0.0, 10, 1e-9, True),  # converged, or rejected (mixle reports a gain of 0.0)
        (5, -1e-13, 10, 1e-9, False),  # a tiny decrease mixle still accepts: no convergence
        (5, 0.0, 10, None, True),  # delta none: a rejected step (or one that changed nothing)
        (5, 1e-12, 10, None, False),
    ],
)
def test_the_step_that_may_end_em_is_known(iteration, gain, max_its, delta, last):
    assert progress.may_end_em(iteration, gain, max_its, delta) is last


def test_stop_text_says_converged_cap_or_unchanged():
    assert (
        progress.stop_text("converged", 1e-9)
        == "converged: the log-likelihood gained less than delta=1e-09"
    )
    assert progress.stop_text("max_its") == "stopped at the iteration cap"
    unchanged = progress.stop_text("unchanged")
    assert "stopped changing" in unchanged and "delta none" in unchanged
    old = {"converged": False, "iterations": 6}  # a summary.json from before "stopped" existed
    assert progress.summary_stop_text(old) == "stopped at the iteration cap"


def test_done_line_says_how_the_fit_stopped_and_the_time_over_segments():
    summary = {
        "iterations": 7,
        "stopped": "unchanged",
        "final_ll": -1.5,
        "failures_survived": 0,
        "wall_seconds": 2.0,
        "wall_seconds_total": 9.5,
        "segments": 3,
        "config": {"delta": None},
    }
    line = fitcmd.done_line(summary, "out/model.json")
    assert line.startswith(
        "done after 7 iterations: stopped when the log-likelihood stopped changing"
    )
    assert "2.0s (this segment; 9.5s over 3 segments)" in line and line.endswith(
        "model in out/model.json"
    )
    once = fitcmd.done_line(
        {**summary, "stopped": "converged", "segments": 1, "config": {"delta": 1e-6}}, "m.json"
    )
    assert (
        "converged: the log-likelihood gained less than delta=1e-06" in once
        and "segments" not in once
    )


def test_progress_is_compact_in_a_log_and_live_in_a_terminal(monkeypatch):
    monkeypatch.delenv(progress.LIVE_ENV, raising=False)
    log = io.StringIO()
    p = progress.Progress(log, "auto")
    for i in (1, 2):
        p.step(
            iteration=i, max_its=5, ll=-1.0 * i, prev_ll=None, live=2, blacklisted=0, recovered=0
        )
    p.done()
    assert p.mode == "line" and log.getvalue().count("\n") == 2 and "\r" not in log.getvalue()
    monkeypatch.setenv(progress.LIVE_ENV, "1")
    tty = io.StringIO()
    p = progress.Progress(tty, "auto")
    p.step(iteration=1, max_its=5, ll=-1.0, prev_ll=None, live=2, blacklisted=0, recovered=0)
    p.done()
    assert p.mode == "live" and tty.getvalue().startswith("\r") and tty.getvalue().endswith("\n")
    off = io.StringIO()
    progress.Progress(off, "off").step(
        iteration=1, max_its=5, ll=-1.0, prev_ll=None, live=2, blacklisted=0, recovered=0
    )
    assert off.getvalue() == ""


def test_chaos_plans_are_seeded_valid_and_cover_every_kind():
    plans = chaos.random_plans(random.Random(5), 10, 3, 8)
    assert plans == chaos.random_plans(random.Random(5), 10, 3, 8)
    assert {p.kind for p in plans} == set(chaos.KINDS)
    for p in plans:
        faults = parse_plan(p.plan)
        assert len(faults) == p.faults
        assert all(1 <= f.worker <= 3 for f in faults)
        assert all(f.call < 8 for f in faults)
        if p.kind == "repeat":
            assert faults[1].call > faults[0].call and faults[1].incarnation == 1
        if p.kind in ("recovery", "double"):
            assert faults[0].worker != faults[1].worker
        if p.kind == "recovery":
            assert faults[1].scope == "recovery"
    two = chaos.random_plans(random.Random(1), 6, 2, 5)
    assert {p.kind for p in two} == {
        "single",
        "repeat",
        "respawn",
    }  # one survivor is needed for the others
    with pytest.raises(ConfigError, match="at least 2 workers"):
        chaos.random_plans(random.Random(1), 3, 1, 5)


def test_chaos_compares_bits_and_measures_recovery():
    ref = {"model": "M", "summary": {"ll": [1.0, 2.0, 3.0]}}
    assert chaos.compare(ref, {"model": "M", "summary": {"ll": [1.0, 2.0, 3.0]}}) == []
    diffs = chaos.compare(ref, {"model": "N", "summary": {"ll": [1.0, 2.5, 3.0]}})
    assert diffs == ["model.json differs", "log-likelihood trace differs from iteration 2"]
    events = [
        {"event": "start", "time": 0.0},
        {"event": "failure_detected", "time": 1.0},
        {"event": "recovery", "time": 1.1},
        {"event": "respawned", "time": 3.5},
        {"event": "closed", "time": 9.0},
    ]
    assert chaos.recovery_seconds(events) == pytest.approx(2.5)
    assert chaos.recovery_seconds(events[:1]) is None
    background = events[:3] + [
        {"event": "respawn_started", "time": 1.3},
        {"event": "respawned", "time": 6.0, "background": True},
    ]
    assert chaos.recovery_seconds(background) == pytest.approx(0.3)  # the join held nothing up
    takeover = [
        {"event": "start", "time": 0.0},
        {"event": "resumed", "time": 0.5},  # a rerun's, no takeover
        {"event": "driver_failed", "time": 4.2, "seen_at": 4.0},
        {"event": "driver_elected", "time": 4.2},
        {"event": "resumed", "time": 6.25},
        {"event": "closed", "time": 9.0},
    ]
    assert chaos.recovery_seconds(takeover) == pytest.approx(
        2.25
    )  # seen dead -> the successor resumed
    assert chaos.recovery_seconds(takeover[:2]) is None
    fresh = takeover[2:4]  # no checkpoint yet: the successor starts the fit over, once elected
    assert chaos.recovery_seconds(fresh) == pytest.approx(0.2)


def test_inspector_tells_a_background_join_step_by_step():
    events = EVENTS[:4] + [
        {
            "event": "respawn_started",
            "time": 101.3,
            "worker": 2,
            "incarnation": 1,
            "shards": [1, 4],
        },
        {
            "event": "respawn_ready",
            "time": 102.5,
            "worker": 2,
            "pid": 23,
            "host": "h",
            "incarnation": 1,
        },
        {
            "event": "respawned",
            "time": 104.0,
            "worker": 2,
            "pid": 23,
            "host": "h",
            "incarnation": 1,
            "seconds": 2.7,
            "shards": [1, 4],
            "background": True,
        },
    ]
    story = inspector.rank_stories(events)[2]
    assert (
        "a replacement is starting (incarnation 1); survivors carry shards [1, 4] meanwhile"
        in story[1]
    )
    assert (
        "respawned as pid 23 on h (incarnation 1), loading its shards in the background" in story[2]
    )
    assert (
        "took back shards [1, 4] (2.70s after it was started, 3.00s after its failure)" in story[3]
    )


def test_best_restart_and_restart_checkpoints():
    runs = [{"ll": [1.0, 5.0]}, {"ll": [2.0, 7.0]}, {"ll": [7.0]}]
    assert fitcmd.best_restart(runs) == 1  # ties go to the earliest
    nan = float("nan")
    assert (
        fitcmd.best_restart([{"ll": [1.0, nan]}, {"ll": [-5.0]}, {"ll": [float("inf")]}]) == 1
    )  # never NaN or inf
    assert fitcmd.best_restart([{"ll": [nan]}, {"ll": []}]) == 0  # none finite: the first
    assert restartpaths.restart_checkpoint("c/ck.h5", 2, 3) == "c/ck.r2.h5"
    assert restartpaths.restart_checkpoint("c/ck.h5", 0, 1) == "c/ck.h5"
    assert restartpaths.restart_checkpoint(None, 0, 3) is None
    assert fitcmd.under_mpi_launcher({"OMPI_COMM_WORLD_SIZE": "3"})
    assert not fitcmd.under_mpi_launcher({})


EVENTS = [
    {
        "event": "start",
        "time": 100.0,
        "workers": 3,
        "num_shards": 6,
        "shrink": "ulfm",
        "mpi": "Open MPI",
        "driver_pid": 1,
        "driver_host": "h",
    },
    {
        "event": "failure_detected",
        "time": 101.0,
        "worker": 2,
        "pid": 22,
        "host": "h",
        "cause": "ulfm: MPI_ERR_PROC_FAILED",
        "failures": 1,
        "incarnation": 0,
        "fenced": True,
    },
    {"event": "recovery", "time": 101.1, "worker": 1, "kind": "estep", "call": 4, "shards": [1]},
    {"event": "shrink", "time": 101.2, "method": "ulfm", "seconds": 0.01},
    {
        "event": "respawned",
        "time": 103.0,
        "worker": 2,
        "pid": 23,
        "host": "h",
        "incarnation": 1,
        "seconds": 1.5,
        "shards": [1, 4],
    },
    {"event": "closed", "time": 110.0, "live": [1, 2, 3], "blacklisted": []},
]


def test_inspector_tells_what_happened_to_which_rank():
    stories = inspector.rank_stories(EVENTS)
    assert set(stories) == {1, 2}
    assert (
        "t+1.00s failed (pid 22 on h, incarnation 0, failure #1), detected by ulfm, fenced"
        == stories[2][0]
    )
    assert "respawned as pid 23" in stories[2][1] and "2.00s after its failure" in stories[2][1]
    assert "recomputed shards [1]" in stories[1][0]
    text = "\n".join(inspector.summarize_events(EVENTS))
    assert "job: 3 workers, 6 shards, shrink by ulfm" in text and "ended: live [1, 2, 3]" in text
    assert "did not end cleanly" in "\n".join(inspector.summarize_events(EVENTS[:-1]))


def test_inspector_rejects_what_it_cannot_read(tmp_path):
    with pytest.raises(ConfigError, match="no such file or folder"):
        inspector.kind_of(str(tmp_path / "nothing"))
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00" * 64)
    with pytest.raises(ConfigError, match="is not an event log"):
        inspector.kind_of(str(junk))
    with pytest.raises(ConfigError, match="holds no summary.json"):
        inspector.summarize(str(tmp_path))
    bad = tmp_path / "e.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(ConfigError, match="not a JSON-lines event log"):
        inspector.summarize(str(bad))
    summary = tmp_path / "summary.json"
    summary.write_text(
        json.dumps(
            {
                "model_spec": "gmm:k=2",
                "data": "x.h5:/X",
                "final_ll": -1.5,
                "iterations": 3,
                "converged": True,
                "wall_seconds": 2.0,
                "failures_survived": 1,
                "failures": {"2": 1},
                "blacklisted": [],
                "recovered_shards": 2,
                "workers": 3,
                "num_shards": 6,
            }
        )
    )
    assert "final ll -1.5 after 3 iterations (converged)" in inspector.summarize(str(summary))[0]


def test_events_are_placed_between_the_iterations_they_happened_in():
    times, its = [10.0, 12.0, 14.0], [1, 2, 3]
    assert event_position(11.0, times, its) == pytest.approx(1.5)
    assert event_position(13.5, times, its) == pytest.approx(2.75)
    assert event_position(5.0, times, its) == pytest.approx(0.5)
    assert event_position(20.0, times, its) == 3.0


def test_inspector_tells_a_rank_dropped_by_keep():
    events = [
        {"time": 0.0, "event": "start", "workers": 2, "num_shards": 4, "shrink": "keep"},
        {
            "time": 1.0,
            "event": "failure_detected",
            "worker": 2,
            "pid": 9,
            "host": "h",
            "incarnation": 0,
            "failures": 1,
            "cause": "heartbeat: silent",
            "fenced": True,
        },
        {
            "time": 1.5,
            "event": "kept",
            "method": "keep",
            "dropped": [2],
            "survivors": [1],
            "ranks": {"1": 1},
        },
    ]
    stories = inspector.rank_stories(events)
    assert (
        "dropped from the kept communicator" in stories[2][1]
        and "survivors [1] keep their ranks" in stories[2][1]
    )
    assert "shrink by keep" in "\n".join(inspector.summarize_events(events))


def test_a_campaign_run_waits_for_replacements_only_when_its_plan_needs_it():
    base = {"PATH": "/bin"}
    assert (
        chaos.fit_env("3:kill:estep_mid:4:0,3:kill:estep_before:5:1", "f.jsonl", base=base)[
            "MIXLE_MPI_RESPAWN_WAIT"
        ]
        == "1"
    )
    assert "MIXLE_MPI_RESPAWN_WAIT" not in chaos.fit_env("2:kill:estep_mid:1", "f.jsonl", base=base)
    assert "MIXLE_MPI_RESPAWN_WAIT" not in chaos.fit_env("", "f.jsonl", base=base)


def test_slow_workers_are_named_in_the_progress_line_its_record_and_the_inspectors_stories():
    s = progress.Status(5, 10, -1.0, -2.0, 0.1, (0.1,), 3, 0, 0, slow=((2, 4.1),))
    assert "slow: w2 x4.1" in progress.format_line(s)
    assert progress.record(s, None, {}, 0.0)["slow"] == {"2": 4.1}
    assert "slow" not in progress.format_line(
        progress.Status(5, 10, -1.0, -2.0, 0.1, (0.1,), 3, 0, 0)
    )
    events = [
        {"time": 0.0, "event": "start"},
        {
            "time": 1.0,
            "event": "speculated",
            "kind": "estep",
            "call": 3,
            "copies": {"1": [7], "3": [10]},
            "stragglers": {"2": 0.02},
            "typical": 0.005,
        },
        {
            "time": 1.5,
            "event": "rebalanced",
            "moves": {"7": [2, 1]},
            "paces": {"1": 0.005, "2": 0.02},
        },
    ]
    stories = inspector.rank_stories(events)
    assert (
        "slow (0.0200 s a shard, the idle ranks 0.0050): copies of its shards on rank 1: [7], rank 3: [10]"
        in stories[2][0]
        and "gave shard 7 to rank 1" in stories[2][1]
    )
    assert "took shard 7 from slower rank 2" in stories[1][0]
    lines = inspector.summarize_summary(
        {"speculation": {"copies": 4, "won": 3, "saved_seconds": 0.5, "rebalanced": 1}}
    )
    assert any(
        "4 shard copies started, 3 won, about 0.50s saved; shards moved 1 time(s)" in ln
        for ln in lines
    )
