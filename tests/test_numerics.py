"""A job whose ranks see different CPUs (simulated per process: numpy's SIMD dispatch turned
down on one rank or on every replacement, tests/jobs/oddcpu) gives the bits of the
homogeneous job under the numeric baseline (core/numerics): numerics auto launches it again
pinned, and a process whose numerics cannot be aligned gets no shard, and the job says so."""

from __future__ import annotations

import os

import pytest
from conftest import with_libraries
from mpiharness import OMPI_PYTHON, REPO, fit_args, run_job, same_fit

pytestmark = pytest.mark.mpijob

NO_AVX512 = "X86_V4 AVX512_ICL AVX512_SPR"  # a node without AVX-512 (Haswell to Zen 3)
PRE_V3 = "X86_V3 " + NO_AVX512  # a node below x86-64-v3: the baseline cannot lift it
ARGS = ("hmm", 240, 3, 1, 4)
PINNED = "launching it again under the numeric baseline"


def _odd(who: str, npy: str, **more) -> dict:
    path = str(REPO / "tests" / "jobs" / "oddcpu")
    return {
        "PYTHONPATH": os.pathsep.join(p for p in (path, os.environ.get("PYTHONPATH")) if p),
        "MIXLE_MPI_TEST_ODD_RANK": who,
        "MIXLE_MPI_TEST_ODD_NPY": npy,
        **more,
    }


def _events(job, name: str) -> list[dict]:
    return [e for e in job.events if e["event"] == name]


def _probes_agree(job) -> dict:
    ranks = _events(job, "ranks")[-1]
    mine = ranks["numerics"]["driver"]
    assert set(ranks["numerics"]["workers"].values()) == {mine["probe"]}, ranks
    return mine


# one MPI job per library: the odd rank killed mid-E-step under one, at initialization under
# the other (CI's time). The kill at initialization once gave a last log-likelihood 1 ulp
# off: the ranks had compiled mixle's kernels, the replacement loaded them (core/jitcache)
KILLS = {"openmpi": "2:kill:estep_mid:1", "mpich": "2:kill:init:0"}


@pytest.mark.parametrize("library", with_libraries([()], id_of=lambda row: "x"))
def test_an_older_cpu_killed_changes_no_bit(library, tmp_path, reference):
    """W = 3, rank 2 without AVX-512, killed in its second E-step (Open MPI) or its
    initialization (MPICH). Numerics auto sees the
    probes differ and launches the job again under the baseline, where every probe agrees;
    the bits are those of the homogeneous, failure-free fit under the baseline. (A cold
    numba cache, filled by the launcher before each launch so that no rank computes with
    kernels it compiled itself, is test_unit_jitcache's: here it costs 45 s of compiling.)"""
    name, python = library
    job = run_job(python, 4, fit_args(*ARGS), tmp_path, plan=KILLS[name], env=_odd("2", NO_AVX512))
    assert job.rc == 0 and PINNED in job.stderr, job.describe()
    assert [e["worker"] for e in _events(job, "failure_detected")][:1] == [2], job.describe()
    mine = _probes_agree(job)
    assert mine["baseline"] == "x86-64-v3" and "X86_V4" not in mine["dispatch"]
    assert not _events(job, "numerics_refused"), job.describe()
    assert same_fit(job.result, reference(*ARGS, 7, mode="baseline")), job.describe()


@pytest.mark.parametrize("library", with_libraries([()], id_of=lambda row: "x"))
def test_a_rank_below_the_baseline_gets_no_shard(library, tmp_path, reference):
    """W = 4, rank 1 below x86-64-v3: pinned, it still differs, so it is refused (rank, host,
    what differs), a replacement under the baseline takes its place, and the bits are the
    homogeneous fit's."""
    _, python = library
    job = run_job(python, 5, fit_args(*ARGS), tmp_path, env=_odd("1", PRE_V3))
    assert job.rc == 0 and PINNED in job.stderr, job.describe()
    (refused,) = _events(job, "numerics_refused")
    assert refused["worker"] == 1 and "rank 1 on " in refused["why"], refused
    assert "numpy dispatch" in refused["why"] and "gets no shard" in refused["why"], refused
    assert same_fit(job.result, reference(*ARGS, 7, mode="baseline")), job.describe()


def test_unpinned_a_replacement_of_other_numerics_changes_no_bit(tmp_path, reference):
    """Numerics auto on a homogeneous machine pins nothing (native speed). Worker 2 dies;
    each replacement comes without AVX-512: it is refused and gets no shard, so the bits
    stay those of the native, failure-free fit."""
    job = run_job(
        OMPI_PYTHON,
        4,
        fit_args(*ARGS),
        tmp_path,
        plan="2:kill:estep_before:1",
        env=_odd("spawned", NO_AVX512, MIXLE_MPI_RESPAWN_WAIT="1"),
    )
    assert job.rc == 0 and PINNED not in job.stderr, job.describe()
    assert _probes_agree(job)["baseline"] == "auto"
    refused = _events(job, "numerics_refused")
    assert refused and all(e["worker"] == 2 for e in refused), job.describe()
    assert same_fit(job.result, reference(*ARGS, 7)), job.describe()


def test_native_numerics_refuses_an_odd_rank_and_needs_one_worker(tmp_path):
    """--numerics native on 2 ranks whose only worker lacks AVX-512: exit 2, naming it."""
    job = run_job(
        OMPI_PYTHON,
        2,
        fit_args(*ARGS),
        tmp_path,
        env=_odd("1", NO_AVX512),
        launch=("--numerics", "native"),
    )
    assert job.rc == 2, job.describe()
    assert "rank 1 on " in job.stderr and "but the job needs 1" in job.stderr, job.describe()


# every other model family, W = 3 and W = 4, the odd CPU at several ranks, kills of the odd
# rank and of another one at initialization and mid-E-step, and an adopted spare
FAMILIES = [
    ("gmm1d", 5, "1", "3:kill:estep_mid:2", {}),
    ("diag", 4, "3", "3:kill:init:0", {}),
    ("full", 4, "2", "1:kill:estep_before:1", {"MIXLE_MPI_SPARES": "1"}),
    ("poisson", 5, "2", "2:kill:estep_mid:1", {}),
    ("composite", 4, "1", "1:kill:estep_before:2", {}),
]


@pytest.mark.parametrize(
    "library, model, ranks, odd, plan, more", with_libraries(FAMILIES, id_of=lambda f: f[0])
)
def test_every_model_family_with_an_older_cpu_changes_no_bit(
    library, model, ranks, odd, plan, more, tmp_path, reference
):
    """One rank without AVX-512 and a planned kill, per model family, under both MPIs:
    pinned, every probe agrees, the kill fired, and the bits are those of the homogeneous
    failure-free fit under the baseline."""
    args = (model, 600, 6, 1, 4)
    job = run_job(
        library[1], ranks, fit_args(*args), tmp_path, plan=plan, env=_odd(odd, NO_AVX512, **more)
    )
    assert job.rc == 0 and PINNED in job.stderr, job.describe()
    _probes_agree(job)
    killed = int(plan.split(":")[0])
    assert [e["worker"] for e in _events(job, "failure_detected")][:1] == [killed], job.describe()
    assert not _events(job, "numerics_refused"), job.describe()
    if more.get("MIXLE_MPI_SPARES"):
        assert _events(job, "spare_adopted"), job.describe()
    assert same_fit(job.result, reference(*args, 7, mode="baseline")), job.describe()


@pytest.mark.parametrize("library", with_libraries([()], id_of=lambda row: "x"))
def test_an_older_cpu_that_takes_over_as_driver_changes_no_bit(library, tmp_path, reference):
    """Failover with rank 1 (the first successor) without AVX-512: the driver dies before
    E-step 3, rank 1 is elected and resumes from the checkpoint. Pinned, its probe was the
    job's, so the fit it finishes has the baseline's failure-free bits."""
    from mixle_mpi.chaos.fault_plan import FIRED_ENV, read_fired, unfired

    args = ("gmm1d", 4000, 4, 1, 8)
    plan, fired = "0:kill:estep_before:3", tmp_path / "fired.jsonl"
    job = run_job(
        library[1],
        4,
        fit_args(*args) + ["--checkpoint", str(tmp_path / "ck.h5")],
        tmp_path,
        plan=plan,
        env=_odd("1", NO_AVX512, MIXLE_MPI_FAILOVER="1", **{FIRED_ENV: str(fired)}),
    )
    assert unfired(plan, read_fired(str(fired))) == [], job.describe()
    assert job.rc == 0 and PINNED in job.stderr, job.describe()
    assert [e["rank"] for e in _events(job, "driver_elected")] == [1], job.describe()
    assert same_fit(job.result, reference(*args, 7, mode="baseline")), job.describe()


@pytest.mark.parametrize("library", with_libraries([()], id_of=lambda row: "x"))
def test_a_copy_won_by_an_older_cpu_changes_no_bit(library, tmp_path, reference):
    """Worker 2 turns 8 times slower at E-step 1; the idle workers, rank 1 without AVX-512
    among them, copy its outstanding shards and win: pinned, the copies are the baseline's
    bits, and so is the fit."""
    from mixle_mpi.chaos.fault_plan import FIRED_ENV, read_fired, unfired

    args = ("gmm1d", 60000, 12, 1, 10)
    plan, fired = "2:slow:estep_before:1:0::8", tmp_path / "fired.jsonl"
    job = run_job(
        library[1],
        4,
        fit_args(*args),
        tmp_path,
        plan=plan,
        env=_odd("1", NO_AVX512, MIXLE_MPI_DRIVER_COMPUTES="0", **{FIRED_ENV: str(fired)}),
    )
    assert unfired(plan, read_fired(str(fired))) == [], job.describe()
    assert job.rc == 0 and PINNED in job.stderr, job.describe()
    won_by = [w for e in _events(job, "speculation_won") for w in e["by"].values()]
    assert 1 in won_by, job.describe()  # the older CPU won copies
    assert same_fit(job.result, reference(*args, 7, mode="baseline")), job.describe()
