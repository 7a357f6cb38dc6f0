"""Chaos tests: real jobs under mpiexec, real rank deaths (SIGKILL/SIGSTOP/exit of a real
process at a deterministic point), and exact equality with the failure-free fit and with
mixle's own ResilientMPEncodedData. Every job runs as a subprocess with a deadline."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import LIBRARIES, with_libraries
from mpiharness import OMPI_PYTHON, fit_args, no_leftover_processes, run_job, same_fit

from mixle_mpi.chaos.fault_plan import FIRED_ENV, read_fired, unfired

pytestmark = pytest.mark.mpijob


def chaos_job(python: str, args: list[str], tmp: Path, plan: str, **kw):
    """``run_job`` under fault ``plan``, failing the test unless every planned fault fired: each
    victim records its fault (``MIXLE_MPI_FAULT_LOG``) just before it acts. Returns (job, records)."""
    log = tmp / "faults.jsonl"
    job = run_job(
        python, 4, args, tmp, plan=plan, env={FIRED_ENV: str(log), **kw.pop("env", {})}, **kw
    )
    records = read_fired(str(log))
    assert unfired(plan, records) == [], (
        f"planned faults that did not fire: {unfired(plan, records)}\n" + job.describe()
    )
    return job, records


# 3 workers, 4 shards, 2 sub-chunks so "mid-accumulation" falls between two seq_update
# calls. E-step calls are numbered from 0; log-density call 0 is the initial one, call k+1
# follows E-step k. By default the driver computes shard 0 itself (driver_computes); the
# tests that name which worker holds which shard turn that off (IDLE): worker 1 then holds
# shards 0 and 3, worker 2 shard 1, worker 3 shard 2.
MODEL, N, SHARDS, SUB, ITS = "gmm1d", 6000, 4, 2, 6
IDLE = {"MIXLE_MPI_DRIVER_COMPUTES": "0"}

SCENARIOS = {
    # name: (fault plan, max_retries, expected failures per worker, expected blacklist)
    "init": ("1:kill:init:0", 2, {1: 1}, []),
    "estep_before": ("2:kill:estep_before:1", 2, {2: 1}, []),
    "estep_mid": ("3:kill:estep_mid:2", 2, {3: 1}, []),
    "after_reply": ("1:kill:estep_after_reply:1", 2, {1: 1}, []),
    # the E-step payload went ahead of the scores (protocol.Stats) and was folded: the shard
    # is recomputed for its scores only, and its payload is not folded twice
    "stats_sent": ("3:kill:stats_sent:2", 2, {3: 1}, []),
    "llsum": ("2:kill:llsum:2", 2, {2: 1}, []),
    "during_respawn": ("2:kill:estep_before:1,2:kill:respawn:0", 2, {2: 2}, [2]),
    "two_in_one_round": ("1:kill:estep_before:2,3:kill:estep_mid:2", 2, {1: 1, 3: 1}, []),
    "recovery_target_dies": (
        "1:kill:estep_before:2,2:kill:estep_before:2:0:recovery",
        2,
        {1: 1, 2: 1},
        [],
    ),
    "blacklisted": ("2:kill:estep_before:1,2:kill:estep_mid:3:1", 2, {2: 2}, [2]),
    "stopped_worker": ("3:stop:estep_before:2", 2, {3: 1}, []),
    "respawned_dies_again": ("1:kill:estep_mid:1,1:kill:estep_before:3:1", 3, {1: 2}, []),
    "exit": ("2:exit:estep_before:1", 2, {2: 1}, []),
}


WAIT_FOR_REPLACEMENT = {"blacklisted", "respawned_dies_again", "during_respawn"}


@pytest.mark.parametrize("library, scenario", with_libraries([(s,) for s in sorted(SCENARIOS)]))
def test_failure_is_recovered_bit_identically(library, scenario, tmp_path, reference):
    _, python = library
    plan, retries, failures, blacklist = SCENARIOS[scenario]
    # a fault planned in a replacement's own rounds needs the replacement computing by then:
    # the fit waits for it to join instead of going on without it (respawn_wait)
    env = {"MIXLE_MPI_RESPAWN_WAIT": "1"} if scenario in WAIT_FOR_REPLACEMENT else {}
    job, records = chaos_job(
        python, fit_args(MODEL, N, SHARDS, SUB, ITS, max_retries=retries), tmp_path, plan, env=env
    )
    assert job.rc == 0, job.describe()
    assert job.result is not None, job.describe()
    ref = reference(MODEL, N, SHARDS, SUB, ITS, 7)
    assert same_fit(job.result, ref), (
        "fit differs from mixle's ResilientMPEncodedData\n" + job.describe()
    )
    got_failures = {int(k): v for k, v in job.result["failures"].items() if v}
    assert got_failures == failures, job.describe()
    assert job.result["blacklist"] == blacklist, job.describe()
    detected = sorted({e["worker"] for e in job.events if e["event"] == "failure_detected"})
    assert detected == sorted(failures), job.describe()
    # every death is seen by heartbeats, the library or its process's end, never by a deadline
    # (a replacement killed before its Ready waited out reconfigure_timeout under MPICH)
    late = [
        e
        for e in job.events
        if e["event"] == "failure_detected" and "reconfigure_timeout" in e.get("cause", "")
    ]
    assert late == [], job.describe()
    assert sorted(r["worker"] for r in records) == sorted(
        w for w, k in failures.items() for _ in range(k)
    )
    assert any(e["event"] == "shrink" for e in job.events), job.describe()
    recovered = [r for r in job.result["rounds"] if r["recomputed"]]
    if "after_reply" not in scenario:
        assert recovered, "no shard was recomputed although a worker died mid-round"
    assert no_leftover_processes(str(tmp_path)) == []


# MPICH's stuck Spawn; Open MPI's synchronous one (respawn_wait) here, its default background
# Spawn in test_a_background_spawn_that_overruns_leaves_the_shards_migrated
@pytest.mark.parametrize("library", LIBRARIES)
def test_replacement_dying_inside_spawn_recovers_to_the_same_bits(library, tmp_path, reference):
    """Campaign finding (MPICH runs 8, 33, ...): a replacement killed while MPI_Comm_spawn
    starts it, with the Spawn in the driver's own thread. The Spawn never returns, but the
    replacement's birth record (runtime/birth.py) tells the driver its process is gone, so it
    gives up at once, not at reconfigure_timeout (the default 60 s here). Open MPI: the
    shards migrate. MPICH: the abandoned spawn holds MPI, so the driver ends the run with
    exit 74 and the launcher runs it again; both faults are spent (each fires once per job),
    so the rerun meets no failure."""
    name, python = library
    plan = "2:kill:estep_before:1,2:kill:spawn"
    job, records = chaos_job(
        python,
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path,
        plan,
        env={"MIXLE_MPI_RESPAWN_WAIT": "1"},
    )
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    assert [r["phase"] for r in records if r["phase"] == "spawn"] == ["spawn"]
    events = [e["event"] for e in job.events]
    if name == "mpich":
        assert "running it again to resume" in job.stderr and events.count("start") == 2, (
            job.describe()
        )
        assert "spawn given up: its process (pid" in job.stderr, job.describe()
        rerun = events[len(events) - events[::-1].index("start") :]
        assert "failure_detected" not in rerun, (
            job.describe()
        )  # the same bits, with no failure this time
    else:
        assert "spawn_unavailable" in events and "migrated" in events, job.describe()
        assert job.result["blacklist"] == [2], job.describe()
        cause = next(e["cause"] for e in job.events if e["event"] == "spawn_unavailable")
        assert "died before it had joined MPI" in cause, job.describe()
    assert no_leftover_processes(str(tmp_path)) == []


@pytest.mark.parametrize("library", with_libraries([()], id_of=lambda row: "join"))
def test_a_replacement_joins_in_the_background_and_takes_its_shards_back(
    library, tmp_path, reference
):
    """The fit does not wait for the replacement: the survivor that recomputed the dead
    worker's shard keeps computing it as its own (no recovery after the failed round), until
    the replacement is set up and loaded; then it takes the shard back. Worker 1 straggles
    10 s in E-step 3 (a "delay" fault), which gives the replacement time to join whatever
    the machine's load. Same bits."""
    _, python = library
    job, _ = chaos_job(
        python,
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path,
        "2:kill:estep_before:1,1:delay:estep_before:3",
        env=IDLE,
    )
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    seq = [
        e["event"]
        for e in job.events
        if e.get("worker") == 2
        and e["event"] in ("failure_detected", "respawn_started", "respawn_ready", "respawned")
    ]
    assert seq == ["failure_detected", "respawn_started", "respawn_ready", "respawned"], (
        job.describe()
    )
    joined = next(e for e in job.events if e["event"] == "respawned")
    assert joined["background"] and joined["shards"] == [1], job.describe()
    recoveries = [(e["kind"], e["call"]) for e in job.events if e["event"] == "recovery"]
    assert recoveries and set(recoveries) == {("estep", 1)}, (
        job.describe()
    )  # afterwards: kept, not resent
    later = [r for r in job.result["rounds"] if r["started_at"] > joined["time"]]
    assert later and not any(r["recomputed"] or r["failed"] for r in later), job.describe()
    assert not [e for e in job.events if e["event"] in ("migrated", "blacklisted")], job.describe()
    assert no_leftover_processes(str(tmp_path)) == []


@pytest.mark.parametrize("library", with_libraries([()], id_of=lambda row: "dies"))
def test_a_replacement_dying_while_it_joins_is_one_more_failure(library, tmp_path, reference):
    """The replacement dies in its setup, in the background (while worker 1 straggles in
    E-step 3): that is its place's second failure (max_retries 2), so the place is
    blacklisted and its shard migrates for good to the survivor that was carrying it."""
    _, python = library
    job, records = chaos_job(
        python,
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path,
        "2:kill:estep_before:1,2:kill:respawn:0,1:delay:estep_before:3",
        env=IDLE,
    )
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    assert {int(k): v for k, v in job.result["failures"].items() if v} == {2: 2}, job.describe()
    # seen at once by ULFM (Open MPI), or by its pid from its birth record (MPICH: the joining
    # replacement's heartbeats have a grace of reconfigure_timeout, longer than the straggle)
    second = [e for e in job.events if e["event"] == "failure_detected" and e["worker"] == 2][1]
    assert second["cause"].startswith(("ulfm:", "its process (pid ")), job.describe()
    assert job.result["blacklist"] == [2], job.describe()
    events = [e["event"] for e in job.events if e.get("worker") == 2]
    assert events.index("respawn_started") < events.index("blacklisted"), job.describe()
    assert "respawned" not in events, job.describe()
    assert sorted(s for e in job.events if e["event"] == "migrated" for s in e["shards"]) == [1], (
        job.describe()
    )
    assert no_leftover_processes(str(tmp_path)) == []


def test_a_background_spawn_that_overruns_leaves_the_shards_migrated(tmp_path, reference):
    """Open MPI runs the Spawn beside the fit. The replacement stops as it starts (a "spawn"
    fault), so the Spawn never finishes: past reconfigure_timeout (4 s here, while worker 1
    straggles 10 s) spawning is given up for the job, the place is blacklisted and its shard
    migrates for good. The failed call did not wait for the Spawn (campaign finding 4: it
    used to wait out the whole deadline)."""
    plan = "2:kill:estep_before:1,2:stop:spawn,1:delay:estep_before:3"
    job, records = chaos_job(
        OMPI_PYTHON,
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path,
        plan,
        env={"MIXLE_MPI_RECONFIGURE_TIMEOUT": "4", **IDLE},
    )
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    events = [e for e in job.events if e.get("worker") == 2]
    assert [e["event"] for e in events[:2]] == ["failure_detected", "respawn_started"], (
        job.describe()
    )
    unavailable = next(e for e in events if e["event"] == "spawn_unavailable")
    assert unavailable["cause"] == "spawn did not finish within 4 s", job.describe()
    assert "blacklisted" in [e["event"] for e in events], job.describe()
    assert job.result["blacklist"] == [2], job.describe()
    assert sorted(s for e in job.events if e["event"] == "migrated" for s in e["shards"]) == [1], (
        job.describe()
    )
    failed_call = next(r for r in job.result["rounds"] if r["kind"] == "estep" and r["call"] == 1)
    assert failed_call["seconds"] < 4, job.describe()  # it did not wait for the Spawn's deadline
    assert no_leftover_processes(str(tmp_path)) == []


def test_a_replacement_dying_inside_its_background_spawn_is_one_more_failure_and_replaced_again(
    tmp_path, reference
):
    """Open MPI, Spawn beside the fit: the replacement dies as it starts (a "spawn" fault).
    Its birth record (runtime/birth.py) shows the process gone, so the driver gives up on
    the Spawn at once, not at reconfigure_timeout (the default 60 s here), and counts one
    more failure of the place. With max_retries 3 the place gets a second replacement (a new
    Spawn works beside the stuck one), which joins while worker 1 straggles again and takes
    its shard back. Same bits."""
    plan = "2:kill:estep_before:1,2:kill:spawn,1:delay:estep_before:3,1:delay:estep_before:4"
    job, records = chaos_job(
        OMPI_PYTHON, fit_args(MODEL, N, SHARDS, SUB, ITS, max_retries=3), tmp_path, plan, env=IDLE
    )
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    events = [e for e in job.events if e.get("worker") == 2]
    assert [e["event"] for e in events if e["event"] != "recovery"][:4] == [
        "failure_detected",
        "respawn_started",
        "failure_detected",
        "respawn_started",
    ], job.describe()
    second = [e for e in events if e["event"] == "failure_detected"][1]
    assert "died before it had joined MPI" in second["cause"] and second["failures"] == 2, (
        job.describe()
    )
    assert second["time"] - events[1]["time"] < 30, (
        job.describe()
    )  # given up long before reconfigure_timeout
    assert "respawned" in [e["event"] for e in events], job.describe()
    assert job.result["blacklist"] == [] and {
        int(k): v for k, v in job.result["failures"].items() if v
    } == {2: 2}
    assert not [e for e in job.events if e["event"] in ("spawn_unavailable", "migrated")], (
        job.describe()
    )
    assert no_leftover_processes(str(tmp_path)) == []


def test_a_spawn_still_stuck_when_the_fit_ends_is_abandoned_without_holding_up_the_exit(
    tmp_path, reference
):
    """External campaign finding (2026-12-03, Open MPI run 7): the replacement died as it
    started, in the last E-step, so the fit ended while its Spawn was stuck. The driver then
    waited out the rest of reconfigure_timeout (60 s) at exit, and the launcher killed the
    job 30 s after the verdict. Now the exit waits at most spawner.EXIT_WAIT (10 s), says so
    (event ``spawn_abandoned``), and the job ends on its own, with the results saved. The
    replacement here is stopped, not killed: a dead one is given up at once by its birth
    record, and it is a process stuck alive that the exit must not wait for."""
    plan = f"2:kill:estep_before:{ITS - 1},2:stop:spawn"
    job, records = chaos_job(OMPI_PYTHON, fit_args(MODEL, N, SHARDS, SUB, ITS), tmp_path, plan)
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    abandoned = [e for e in job.events if e["event"] == "spawn_abandoned"]
    assert len(abandoned) == 1 and abandoned[0]["workers"] == [2], job.describe()
    # the driver ended within the launcher's grace; the stopped replacement is the launcher's to
    # kill (launch/jobchecks.py: every remaining rank stopped)
    assert "are still running: killing the job" not in job.stderr, job.describe()
    assert no_leftover_processes(str(tmp_path)) == []


@pytest.mark.parametrize("library", LIBRARIES)  # the same path under both
def test_all_workers_lost_fails_cleanly(library, tmp_path):
    """With max_retries=1 and every worker dead, the driver ends with a clear error."""
    _, python = library
    plan = "1:kill:estep_before:1,2:kill:estep_before:1,3:kill:estep_before:1"
    job, _ = chaos_job(
        python, fit_args(MODEL, N, SHARDS, SUB, ITS, max_retries=1), tmp_path, plan, timeout=120
    )
    assert job.rc == 1, job.describe()
    assert (
        "NoWorkersLeft" in job.stderr and "every worker rank is dead or blacklisted" in job.stderr
    ), job.describe()
    assert no_leftover_processes(str(tmp_path)) == []


@pytest.mark.parametrize("library", LIBRARIES)  # MPICH's in test_exactness
def test_failure_free_matches_mixle_and_reports_nothing(library, tmp_path, reference):
    _, python = library
    job = run_job(
        python,
        4,
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path,
        env={FIRED_ENV: str(tmp_path / "faults.jsonl")},
    )
    assert job.rc == 0, job.describe()
    assert not (tmp_path / "faults.jsonl").exists()  # no plan, no fault
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7))
    assert all(not r["recomputed"] and not r["failed"] for r in job.result["rounds"])
    assert not [e for e in job.events if e["event"] == "failure_detected"]


@pytest.mark.parametrize("library", LIBRARIES)
def test_without_respawn_shards_migrate_for_good(library, tmp_path, reference):
    """respawn disabled (as where spawning is impossible): the dead rank's shards move to
    the survivors at once, and the log says why."""
    _, python = library
    job, _ = chaos_job(
        python,
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path,
        "1:kill:estep_before:1",
        env={"MIXLE_MPI_RESPAWN": "0", **IDLE},
    )
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7))
    assert job.result["blacklist"] == [1]
    black = [e for e in job.events if e["event"] == "blacklisted"]
    assert black and "respawn" in black[0]["cause"]
    moved = sorted(s for e in job.events if e["event"] == "migrated" for s in e["shards"])
    assert moved == [0, 3]


# Open MPI keeps its communicator for real under srun: test_slurm (CI) runs that
@pytest.mark.parametrize("library", LIBRARIES)
def test_keep_goes_on_with_the_original_communicator(library, tmp_path, reference):
    """The third way to continue (what srun --mpi=pmix gets), forced under mpiexec: no shrink
    at all, the survivors keep their ranks, the dead rank is never addressed again. Under Open
    MPI without respawn, as under srun (the shards migrate); under MPICH with a replacement
    (Spawn works here) joining beside the kept communicator. Same bits."""
    name, python = library
    respawn = name != "openmpi"
    job, _ = chaos_job(
        python,
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path,
        "3:kill:estep_mid:2",
        env={
            "MIXLE_MPI_CONTINUATION": "keep",
            "MIXLE_MPI_RESPAWN": "1" if respawn else "0",
            "MIXLE_MPI_RESPAWN_WAIT": "1",
        },
    )  # the replacement serves before the fit ends
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    chosen = [e for e in job.events if e["event"] == "continuation"]
    assert chosen and chosen[0]["method"] == "keep", job.describe()
    kept = [e for e in job.events if e["event"] == "kept"]
    assert [(e["dropped"], e["survivors"]) for e in kept] == [([3], [1, 2])], job.describe()
    assert {int(k): v for k, v in kept[0]["ranks"].items()} == {1: 1, 2: 2}  # not renumbered
    assert not [e for e in job.events if e["event"] in ("shrink", "shrink_fallback")], (
        job.describe()
    )
    if respawn:
        assert [e["worker"] for e in job.events if e["event"] == "respawned"] == [3], job.describe()
    else:
        assert job.result["blacklist"] == [3], job.describe()
        lost = sorted(
            s for e in job.events if e["event"] == "recovery" for s in e["shards"]
        )  # worker 3's shards
        assert (
            lost
            and sorted(s for e in job.events if e["event"] == "migrated" for s in e["shards"])
            == lost
        ), job.describe()
    assert no_leftover_processes(str(tmp_path)) == []


# A worker killed while it loads its shards (the ``load`` fault phase), issue 37: MPICH froze
# the job for the whole reconfigure_timeout, and its silence made the healthy workers leave.
LOAD_SCENARIOS = {
    # name: (fault plan, extra environment)
    "alone": ("3:kill:load", {}),
    "after_a_handshake_death": ("1:kill:handshake,3:kill:load", {}),
    "replacement": ("2:kill:estep_before:1,2:kill:load:0:1", {"MIXLE_MPI_RESPAWN_WAIT": "1"}),
    # respawn off: worker 3's shard migrates to worker 1 (its second load), which dies loading it
    "migration": ("3:kill:load,1:kill:load:1", {"MIXLE_MPI_RESPAWN": "0"}),
    # a hot spare (rank 3) adopts place 1 as incarnation 1 and dies loading its shards
    "adoption": (
        "1:kill:load,1:kill:load:0:1",
        {"MIXLE_MPI_RESPAWN": "0", "MIXLE_MPI_SPARES": "1"},
    ),
}


@pytest.mark.parametrize("library, scenario", with_libraries([(s,) for s in LOAD_SCENARIOS]))
def test_a_death_while_a_worker_loads_is_found_by_heartbeats_and_nobody_else_fails(
    library, scenario, tmp_path, reference
):
    """Heartbeats cover a worker while it loads, as at any other moment: its death is found
    by heartbeats (1 s here; measured 1.0-1.2 s), not at reconfigure_timeout (20 s here), and the
    driver's own beats go on meanwhile, so no live worker leaves: the job fails exactly the
    places whose processes were killed, and ends with the reference's bits."""
    _, python = library
    plan, env = LOAD_SCENARIOS[scenario]
    job, records = chaos_job(python, fit_args(MODEL, N, SHARDS, SUB, ITS), tmp_path, plan, env=env)
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    load = next(r for r in records if r["phase"] == "load")
    detected = [e for e in job.events if e["event"] == "failure_detected"]
    found = [e for e in detected if e["pid"] == load["pid"]]
    assert len(found) == 1, job.describe()
    assert found[0]["detected_at"] - load["time"] < 10.0, (
        job.describe()
    )  # heartbeats (1 s), not reconfigure_timeout (20 s)
    killed_in_the_fit = [
        r for r in records if r["phase"] != "handshake"
    ]  # a handshake death restarts the start
    assert len(detected) == len(killed_in_the_fit), job.describe()  # no live worker taken for dead
    assert "heard nothing from the driver" not in job.stderr, job.describe()
    assert no_leftover_processes(str(tmp_path)) == []


@pytest.mark.parametrize("library", [p for p in LIBRARIES if p.id == "mpich"])
def test_a_driver_whose_spawn_holds_mpi_tells_the_workers_how_long_to_wait(
    library, tmp_path, reference
):
    """Under MPICH a Spawn runs in the driver's own thread and holds the library, so the
    driver's heartbeat thread cannot beat until it returns (here never: the replacement is
    stopped as it starts, so the Spawn waits out reconfigure_timeout, 10 s, and the run is
    resumed). Before the Spawn the driver tells every worker how long it may be silent
    (``protocol.Quiet``); without that notice they left after driver_timeout (4 s here):
    "heard nothing from the driver for 4.1 s", measured."""
    _, python = library
    plan = "2:kill:estep_before:1,2:stop:spawn"
    job, _ = chaos_job(
        python,
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path,
        plan,
        env={**IDLE, "MIXLE_MPI_DRIVER_TIMEOUT": "4", "MIXLE_MPI_RECONFIGURE_TIMEOUT": "10"},
    )
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    assert "spawn did not finish within 10 s" in job.stderr, (
        job.describe()
    )  # the driver was silent that long
    assert "heard nothing from the driver" not in job.stderr, job.describe()
    assert no_leftover_processes(str(tmp_path)) == []


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="planting as another user needs root")
def test_birth_records_planted_under_the_old_names_by_another_user_steer_nothing(
    tmp_path, reference
):
    """Issue 33's attack, as another local user would make it: while worker 2 is respawned,
    records under the old predictable names (``<temp>/mixle_mpi_birth_<driver pid>_2_<n>``)
    name one of that user's processes with another start time, and the writer's temp name is
    taken. Before, the driver took the record for the replacement's, judged it died before it
    joined MPI, and SIGKILLed that pid (this test failed so: the planted process was killed). Records now live in the job's private run
    folder under random names, and only this user's are read: the planted process lives,
    and the job fails exactly the places the plan killed."""
    import json
    import os
    import subprocess
    import tempfile
    import threading

    victim = subprocess.Popen(
        ["sleep", "300"], preexec_fn=lambda: (os.setgid(65534), os.setuid(65534))
    )
    try:
        ident = __import__("mixle_mpi.core.procs", fromlist=["identity"]).identity(victim.pid)
        planted, stop = [], threading.Event()

        def plant() -> None:
            events = tmp_path / "events.jsonl"
            while not stop.wait(0.05):
                lines = events.read_text().splitlines() if events.exists() else []
                start = next((json.loads(x) for x in lines if '"start"' in x), None)
                if start is None:
                    continue
                for n in range(4):
                    path = os.path.join(
                        tempfile.gettempdir(), f"mixle_mpi_birth_{start['driver_pid']}_2_{n}"
                    )
                    with open(path, "w") as fh:
                        # its pid with another start time: taken for a replacement that died (then killed by pid)
                        fh.write(f"{__import__('socket').gethostname()} {ident[0]} 1\n")
                    os.chown(path, 65534, 65534)
                    os.mkdir(
                        path + ".tmp"
                    )  # and the writer's temp name taken, so its own record never replaces it
                    planted.extend([path, path + ".tmp"])
                return

        planter = threading.Thread(target=plant, daemon=True)
        planter.start()
        plan = "2:kill:estep_before:1,1:delay:estep_before:3"  # the delay gives the replacement time to join
        job, _ = chaos_job(
            OMPI_PYTHON,
            fit_args(MODEL, N, SHARDS, SUB, ITS, max_retries=3),
            tmp_path,
            plan,
            env=IDLE,
        )
        stop.set()
        planter.join(5)
        assert planted, "the records were never planted: the attack did not happen"
        assert job.rc == 0, job.describe()
        assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
        assert victim.poll() is None, "the planted process was killed"
        assert {int(k): v for k, v in job.result["failures"].items() if v} == {2: 1}, job.describe()
        assert (
            job.result["blacklist"] == [] and "died before it had joined MPI" not in job.stderr
        ), job.describe()
        assert "respawned" in [e["event"] for e in job.events], job.describe()
        assert no_leftover_processes(str(tmp_path)) == []
    finally:
        victim.kill()
        victim.wait()
        for path in planted if "planted" in dir() else []:
            if os.path.isdir(path):
                os.rmdir(path)
            elif os.path.exists(path):
                os.unlink(path)


@pytest.mark.parametrize("library", with_libraries([()], id_of=lambda row: "stopped"))
def test_a_rank_stopped_before_its_hello_is_fenced_within_seconds(library, tmp_path, reference):
    """A rank SIGSTOPped as the job starts has no heartbeats yet: the handshake waited for it
    the whole startup_timeout (external campaign, MPICH seed 3711 run 28: 21.7 s). On the
    driver's host, a rank whose process stays stopped for over a second is now fenced and
    left out, then recovered like any failed worker (measured: 1.7-1.8 s on both MPIs)."""
    _, python = library
    job, records = chaos_job(
        python,
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path,
        "2:stop:startup",
        env={"MIXLE_MPI_STARTUP_TIMEOUT": "60"},
    )
    assert job.rc == 0, job.describe()
    assert same_fit(job.result, reference(MODEL, N, SHARDS, SUB, ITS, 7)), job.describe()
    failed = [e for e in job.events if e["event"] == "failure_detected"]
    assert [e["worker"] for e in failed] == [2] and "stayed stopped" in failed[0]["cause"], (
        job.describe()
    )
    assert failed[0]["time"] - records[0]["time"] < 30.0, (
        job.describe()
    )  # not the 60 s startup_timeout
    assert no_leftover_processes(str(tmp_path)) == []


@pytest.mark.parametrize("library", [p for p in LIBRARIES if p.id == "mpich"])
def test_a_replacement_whose_driver_dies_before_its_setup_ends_at_once(library, tmp_path):
    """Issue 33: a replacement has no heartbeats before its Setup, and waited for it without
    a deadline; under MPICH one whose driver died in that window lived on. It now watches the
    driver's process (its identity, given at the Spawn) and ends with it, and in any case at
    startup_timeout. The driver dies here right after the Spawn returned, before the Setup
    (no checkpoint: the job fails, and nothing of it is left behind)."""
    _, python = library
    t0 = __import__("time").monotonic()
    job, _ = chaos_job(
        python,
        fit_args(MODEL, N, SHARDS, SUB, ITS),
        tmp_path,
        "2:kill:estep_before:1,0:kill:respawn",
        env=IDLE,
        timeout=120,
    )
    assert job.rc != 0, job.describe()
    assert "died before it set this replacement up" in job.stderr, job.describe()
    assert __import__("time").monotonic() - t0 < 60, job.describe()
    assert no_leftover_processes(str(tmp_path)) == []
