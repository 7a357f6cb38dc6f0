"""Reconfiguration decisions (pure): shrink or not and how, renumbering, blacklist causes,
and where a blacklisted place's shards go for good."""

from __future__ import annotations

import random

import pytest

from mixle_mpi.core.errors import ConfigError
from mixle_mpi.policy.reconfig_plan import (
    AUTO,
    EMULATED,
    KEEP,
    ULFM,
    blacklist_cause,
    choose_method,
    detach_from_pmix,
    migration,
    renumber,
    replacement_command,
    requested_method,
    shrink_method,
    shrink_needed,
    spawn_timeout_is_fatal,
    spawn_unavailable,
    srun_plugin,
)


def test_only_a_failure_of_an_original_rank_shrinks():
    original = {1: 1, 3: 2}  # worker 2 was respawned: it has its own intercommunicator
    assert shrink_needed([3], original) and not shrink_needed([2], original)


@pytest.mark.parametrize(
    "configured, started, reported, method, fallback",
    [
        (ULFM, True, True, ULFM, False),
        (ULFM, True, False, EMULATED, True),  # ULFM would wait for good for a fenced, live rank
        (ULFM, False, True, EMULATED, True),  # a death inside the startup collectives
        (EMULATED, True, True, EMULATED, False),
        (KEEP, True, True, KEEP, False),
        (KEEP, False, False, KEEP, False),  # keeping needs no collective, even while the job starts
    ],
)
def test_shrink_method(configured, started, reported, method, fallback):
    got, why = shrink_method(configured, started, reported)
    assert got == method and (why is not None) == fallback


def test_survivors_keep_their_order_after_the_driver():
    assert renumber({2: 2, 3: 3, 5: 5}, [5, 2, 3]) == {2: 1, 3: 2, 5: 3}


def test_survivors_are_renumbered_in_the_order_of_their_ranks_not_of_their_ids():
    """Spare 4 adopted place 1 (at rank 3 after an earlier shrink); then worker 3 died: the
    shrunk communicator keeps the ranks' order, so worker 2 is rank 1 and worker 1 rank 2."""
    assert renumber({2: 1, 3: 2, 1: 3}, [1, 2]) == {2: 1, 1: 2}


def test_blacklist_causes():
    assert blacklist_cause(2, 2, True) == "max_retries=2 reached"
    assert "respawn disabled" in blacklist_cause(1, 2, False)
    assert "spawning failed" in blacklist_cause(1, 2, True)


def test_migration_spreads_homeless_shards_to_the_least_loaded_in_id_order():
    owners = {1: [0, 3, 6], 2: [1, 4], 3: [2, 5]}
    new, plan = migration(owners, blacklisted=[1], live=[2, 3])
    assert plan == {2: [0, 6], 3: [3]}
    assert new == {1: [], 2: [0, 1, 4, 6], 3: [2, 3, 5]}
    assert sorted(s for ss in new.values() for s in ss) == list(range(7))
    assert owners[1] == [0, 3, 6]  # the input is not changed


def test_migration_with_nothing_homeless_moves_nothing_and_with_no_live_worker_refuses():
    assert migration({1: [0], 2: [1]}, blacklisted=[], live=[1, 2])[1] == {}
    with pytest.raises(ValueError, match="no candidate workers"):
        migration({1: [0], 2: [1]}, blacklisted=[1, 2], live=[])


def test_a_timed_out_spawn_ends_the_job_only_where_it_holds_mpi():
    assert spawn_timeout_is_fatal("MPICH") and not spawn_timeout_is_fatal("Open MPI")


# -- one reconfiguration pass as actions ------------------------------------------------------
from mixle_mpi.policy import reconfig_plan  # noqa: E402
from mixle_mpi.policy.membership import Membership  # noqa: E402


def _failed(membership, *workers):
    for w in workers:
        membership.mark_failed(w)
    return list(workers)


def test_an_original_rank_below_max_retries_shrinks_then_respawns():
    m = Membership([1, 2, 3], max_retries=2)
    actions = reconfig_plan.plan(
        _failed(m, 2), {1: 1, 2: 2, 3: 3}, m, can_spawn=True, respawn_setting=True
    )
    assert actions == [reconfig_plan.ShrinkComm(), reconfig_plan.Respawn(2)]


def test_a_respawned_worker_failing_again_is_respawned_without_a_shrink():
    m = Membership([1, 2, 3], max_retries=3)
    _failed(m, 2)
    m.revive(2)
    actions = reconfig_plan.plan(
        _failed(m, 2), {1: 1, 3: 2}, m, can_spawn=True, respawn_setting=True
    )
    assert actions == [reconfig_plan.Respawn(2)]


def test_max_retries_and_no_spawn_blacklist_with_their_causes():
    m = Membership([1, 2, 3], max_retries=1)
    actions = reconfig_plan.plan(
        _failed(m, 1, 3), {1: 1, 2: 2, 3: 3}, m, can_spawn=True, respawn_setting=True
    )
    assert actions == [
        reconfig_plan.ShrinkComm(),
        reconfig_plan.Blacklist(1, "max_retries=1 reached"),
        reconfig_plan.Blacklist(3, "max_retries=1 reached"),
    ]
    m = Membership([1, 2, 3], max_retries=3)
    actions = reconfig_plan.plan(
        _failed(m, 3), {1: 1, 2: 2, 3: 3}, m, can_spawn=False, respawn_setting=False
    )
    assert actions == [
        reconfig_plan.ShrinkComm(),
        reconfig_plan.Blacklist(3, blacklist_cause(1, 3, False)),
    ]
    assert reconfig_plan.respawn_failed(m, 3, True).cause.startswith("respawn unavailable")


def test_migrate_moves_only_blacklisted_places_shards():
    owners = {1: [0, 3], 2: [1, 4], 3: [2, 5]}
    assert reconfig_plan.migrate(owners, [], [1, 2, 3]) is None
    move = reconfig_plan.migrate(owners, [2], [1, 3])
    assert move.owners[2] == [] and sorted(move.owners[1] + move.owners[3]) == [0, 1, 2, 3, 4, 5]
    assert sorted(s for ss in move.plan.values() for s in ss) == [1, 4]


# -- spares ------------------------------------------------------------------------------------
def test_a_spare_adopts_the_failed_place_before_any_respawn_and_without_spawn():
    owners = {1: [0, 2], 2: [1, 3], 3: [], 4: []}
    m = Membership([1, 2, 3, 4], max_retries=2)
    assert reconfig_plan.idle_places(owners, m.live()) == [3, 4]
    actions = reconfig_plan.plan(
        _failed(m, 2),
        {1: 1, 2: 2, 3: 3, 4: 4},
        m,
        can_spawn=False,
        respawn_setting=True,
        owners=owners,
        spares=[3, 4],
    )
    assert actions == [reconfig_plan.ShrinkComm(), reconfig_plan.Adopt(2, 3)]


def test_when_spares_run_out_respawn_or_migration_takes_over():
    owners = {1: [0], 2: [1], 3: [2], 4: []}
    m = Membership([1, 2, 3, 4], max_retries=2)
    both = reconfig_plan.plan(
        _failed(m, 1, 2), {}, m, can_spawn=True, respawn_setting=True, owners=owners, spares=[4]
    )
    assert both == [reconfig_plan.Adopt(1, 4), reconfig_plan.Respawn(2)]
    m = Membership([1, 2, 3, 4], max_retries=2)
    nospawn = reconfig_plan.plan(
        _failed(m, 1, 2), {}, m, can_spawn=False, respawn_setting=False, owners=owners, spares=[4]
    )
    assert nospawn == [
        reconfig_plan.Adopt(1, 4),
        reconfig_plan.Blacklist(2, blacklist_cause(1, 2, False)),
    ]


def test_a_failed_spare_is_given_up_and_max_retries_still_blacklists():
    owners = {1: [0], 2: [1], 3: []}
    m = Membership([1, 2, 3], max_retries=1)
    actions = reconfig_plan.plan(
        _failed(m, 3), {}, m, can_spawn=True, respawn_setting=True, owners=owners, spares=[3]
    )
    assert actions == [reconfig_plan.Blacklist(3, "max_retries=1 reached")]
    m = Membership([1, 2, 3], max_retries=2)
    actions = reconfig_plan.plan(
        _failed(m, 3), {}, m, can_spawn=True, respawn_setting=True, owners=owners, spares=[3]
    )
    assert actions == [reconfig_plan.Blacklist(3, reconfig_plan.SPARE_LOST)]
    m = Membership([1, 2, 3], max_retries=1)
    actions = reconfig_plan.plan(
        _failed(m, 1), {}, m, can_spawn=True, respawn_setting=True, owners=owners, spares=[3]
    )
    assert actions == [
        reconfig_plan.Blacklist(1, "max_retries=1 reached")
    ]  # its shards then migrate (to the spare)


def test_a_retired_spare_leaves_the_membership():
    m = Membership([1, 2, 3], max_retries=2)
    m.retire(3)
    assert 3 not in m.records and m.live() == [1, 2] and m.failures() == {1: 0, 2: 0}


# -- the three ways to continue: which one, where ------------------------------------------
@pytest.mark.parametrize(
    "ulfm, group, method",
    [
        (True, True, ULFM),  # mpiexec --with-ft ulfm (Open MPI)
        (
            False,
            True,
            EMULATED,
        ),  # MPICH (mpiexec or srun --mpi=pmi2), Open MPI mpiexec without ULFM
        (False, False, KEEP),  # Open MPI under srun --mpi=pmix: no PMIx groups in SLURM's plugin
        (True, False, ULFM),
    ],
)
def test_choose_method_prefers_ulfm_then_the_emulation_then_keep(ulfm, group, method):
    got, why = choose_method(AUTO, ulfm, group)
    assert got == method and why


def test_a_requested_method_is_used_only_where_it_works():
    assert choose_method(KEEP, True, True)[0] == KEEP  # keep always works
    assert choose_method(EMULATED, True, True)[0] == EMULATED
    with pytest.raises(ConfigError, match="MIXLE_MPI_CONTINUATION=emulated.*does not work"):
        choose_method(EMULATED, False, False)
    with pytest.raises(ConfigError, match="ulfm"):
        choose_method(ULFM, False, True)


def test_requested_method_from_the_environment():
    assert (
        requested_method({}) == AUTO
        and requested_method({"MIXLE_MPI_CONTINUATION": " Keep "}) == KEEP
    )
    with pytest.raises(ConfigError, match="valid values are auto, ulfm, emulated, keep"):
        requested_method({"MIXLE_MPI_CONTINUATION": "shrink"})


@pytest.mark.parametrize(
    "env, plugin",
    [
        (
            {"PMIX_NAMESPACE": "slurm.pmix.13.0", "SLURM_MPI_TYPE": "pmix", "SLURM_STEP_ID": "0"},
            "pmix",
        ),
        (
            {"PMI_JOBID": "9.0", "PMI_RANK": "0", "SLURM_MPI_TYPE": "pmi2", "SLURM_STEP_ID": "0"},
            "pmi2",
        ),
        (
            {"PMIX_NAMESPACE": "prterun-vm-17627@1", "SLURM_JOB_ID": "7"},
            None,
        ),  # Open MPI mpiexec in an allocation
        (
            {"PMI_RANK": "0", "PMI_FD": "9", "PMI_HOSTNAME": "vm", "SLURM_JOB_ID": "7"},
            None,
        ),  # MPICH's Hydra
        (
            {
                "PMI_RANK": "0",
                "PMI_FD": "5",
                "PMI_HOSTNAME": "vm",
                "PMI_JOBID": "21.0",
                "SLURM_MPI_TYPE": "pmi2",
                "SLURM_STEP_ID": "0",
            },
            None,
        ),  # Hydra in an allocation whose MpiDefault is pmi2: its proxies ran under srun
        ({}, None),
    ],
)
def test_srun_direct_launch_is_told_from_the_environment(env, plugin):
    assert srun_plugin(env) == plugin


def test_only_open_mpi_under_srun_pmix_leaves_pmix_and_srun_never_spawns():
    assert detach_from_pmix("Open MPI", "pmix")
    assert not detach_from_pmix("Open MPI", None) and not detach_from_pmix("MPICH", "pmi2")
    assert spawn_unavailable("Open MPI", "pmix") and spawn_unavailable("MPICH", "pmi2")
    assert spawn_unavailable("Open MPI", None) is None and spawn_unavailable("MPICH", None) is None


def test_a_replacement_starts_by_the_fast_entry_unless_it_must_unpickle_the_users_script():
    full, fast = ["python", "script.py"], ["python", "-m", "mixle_mpi.runtime.replacement_entry"]
    assert replacement_command(full, fast, (b"encoder", b"model")) == fast
    assert (
        replacement_command(full, fast, (b"encoder", b"c__main__\nMyModel")) == full
    )  # only the script defines it
    assert replacement_command(full, None, (b"encoder", b"model")) == full


def test_keep_drops_the_dead_original_ranks_without_a_shrink_or_renumbering():
    m = Membership([1, 2, 3], max_retries=2)
    actions = reconfig_plan.plan(
        _failed(m, 2), {1: 1, 2: 2, 3: 3}, m, can_spawn=False, respawn_setting=True, method=KEEP
    )
    assert actions == [
        reconfig_plan.KeepComm((2,)),
        reconfig_plan.Blacklist(2, blacklist_cause(1, 2, True)),
    ]
    assert not any(isinstance(a, reconfig_plan.ShrinkComm) for a in actions)


def test_keep_ignores_a_respawned_worker_and_still_respawns_where_spawn_works():
    m = Membership([1, 2, 3], max_retries=3)
    _failed(m, 2)
    m.revive(2)  # worker 2 now lives in its own intercommunicator
    actions = reconfig_plan.plan(
        _failed(m, 2, 3), {1: 1, 3: 3}, m, can_spawn=True, respawn_setting=True, method=KEEP
    )
    assert actions == [
        reconfig_plan.KeepComm((3,)),
        reconfig_plan.Respawn(2),
        reconfig_plan.Respawn(3),
    ]


def test_under_keep_a_spare_adopts_the_dead_rank_place_without_spawn():
    """srun: no Spawn, no shrink; the spare (an original rank) takes the place and keeps its rank."""
    owners = {1: [0, 2], 2: [1, 3], 3: []}
    m = Membership([1, 2, 3], max_retries=2)
    actions = reconfig_plan.plan(
        _failed(m, 2),
        {1: 1, 2: 2, 3: 3},
        m,
        can_spawn=False,
        respawn_setting=True,
        owners=owners,
        spares=[3],
        method=KEEP,
    )
    assert actions == [reconfig_plan.KeepComm((2,)), reconfig_plan.Adopt(2, 3)]


def reference_plan(
    failed, original, membership, can_spawn, respawn_setting, owners=None, spares=()
):
    """reconfig_plan.plan as it was, with a list scan for the spare pool."""
    failed = sorted(failed)
    pool = [s for s in sorted(spares) if s not in failed]
    actions = [reconfig_plan.ShrinkComm()] if reconfig_plan.shrink_needed(failed, original) else []
    decision = membership.decide(failed, can_spawn or bool(pool))
    later = []
    for w in decision.respawn:
        if owners is not None and not owners.get(w):
            later.append(reconfig_plan.Blacklist(w, reconfig_plan.SPARE_LOST))
        elif pool:
            actions.append(reconfig_plan.Adopt(w, pool.pop(0)))
        elif can_spawn:
            actions.append(reconfig_plan.Respawn(w))
        else:
            later.append(reconfig_plan.blacklisting(membership, w, respawn_setting))
    return (
        actions
        + later
        + [reconfig_plan.blacklisting(membership, w, respawn_setting) for w in decision.blacklist]
    )


def test_plan_is_the_reference_on_random_failures_and_spares():
    rng = random.Random(13)
    for _ in range(2000):
        ids = list(range(1, rng.randint(2, 30)))
        m = Membership(ids, max_retries=rng.randint(1, 3))
        owners = {w: ([w] if rng.random() < 0.7 else []) for w in ids}
        for w in rng.sample(ids, rng.randint(0, len(ids))):
            for _ in range(rng.randint(1, 3)):
                if m.mark_failed(w) and rng.random() < 0.5:
                    m.revive(w)
        failed = [w for w, r in m.records.items() if r.state == "dead"]
        spares = [w for w in ids if not owners[w] and rng.random() < 0.8]
        original = {w: w for w in ids if rng.random() < 0.5}
        for can_spawn, setting in ((True, True), (False, True), (False, False)):
            args = (failed, original, m, can_spawn, setting)
            assert reconfig_plan.plan(*args, owners, spares) == reference_plan(
                *args, owners, spares
            )
            assert reconfig_plan.plan(*args) == reference_plan(*args)


def reference_migration(owners, blacklisted, live):
    """reconfig_plan.migration as it was (a scan of every place, sorted candidates)."""
    from mixle_mpi.policy.placement import spread

    gone = set(blacklisted)
    homeless = sorted(s for w, ss in owners.items() if w in gone for s in ss)
    new = {w: ([] if w in gone else sorted(ss)) for w, ss in owners.items()}
    if not homeless:
        return new, {}
    plan = spread(homeless, {w: len(new.get(w, [])) for w in sorted(live)})
    for w, sids in plan.items():
        new[w] = sorted(new.get(w, []) + sids)
    return new, plan


def test_migration_is_the_reference_on_random_layouts():
    """Property test: random (unsorted) owner lists, blacklisted places with and without
    shards or owner entries, live places with and without owner entries."""
    rng = random.Random(2026)
    for _ in range(3000):
        ids = list(range(1, rng.randint(2, 25)))
        shards = list(range(rng.randint(0, 80)))
        rng.shuffle(shards)
        owners = {w: [] for w in ids if rng.random() < 0.9}
        for s in shards:
            if owners:
                owners[rng.choice(sorted(owners))].append(s)
        gone = rng.sample(ids, rng.randint(0, len(ids) - 1)) + ([99] if rng.random() < 0.1 else [])
        live = [w for w in ids if w not in gone]
        rng.shuffle(live)
        got, want = migration(owners, gone, live), reference_migration(owners, gone, live)
        assert got == want and [list(d.items()) for d in got] == [list(d.items()) for d in want]
