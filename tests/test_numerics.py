"""A job whose ranks see different CPUs (simulated per rank: numpy's SIMD dispatch turned
down on one rank, tests/jobs/oddcpu.py) stays bit-identical under the numeric baseline that
`mixle-mpi run` sets on every rank (core/numerics), and a rank whose numerics cannot be
aligned gets no shard, and the job says so."""

from __future__ import annotations

import pytest
from conftest import with_libraries
from mpiharness import OMPI_PYTHON, REPO, fit_args, run_job, same_fit

pytestmark = pytest.mark.mpijob

ODD = str(REPO / "tests" / "jobs" / "oddcpu.py")
NO_AVX512 = "X86_V4 AVX512_ICL AVX512_SPR"  # a node without AVX-512 (Haswell to Zen 3)
PRE_V3 = "X86_V3 " + NO_AVX512  # a node below x86-64-v3: the baseline cannot lift it
ARGS = ("hmm", 400, 3, 1, 5)


def _odd(rank: int, npy: str, **more) -> dict:
    return {"MIXLE_MPI_TEST_ODD_RANK": str(rank), "MIXLE_MPI_TEST_ODD_NPY": npy, **more}


def _events(job, name: str) -> list[dict]:
    return [e for e in job.events if e["event"] == name]


@pytest.mark.parametrize("library", with_libraries([()], id_of=lambda row: "x"))
def test_an_older_cpu_killed_mid_estep_changes_no_bit(library, tmp_path, reference):
    """W = 3, rank 2 without AVX-512 and killed in its second E-step: every probe agrees
    under the baseline, and the bits are those of the homogeneous, failure-free fit."""
    _, python = library
    job = run_job(
        python,
        4,
        fit_args(*ARGS),
        tmp_path,
        plan="2:kill:estep_before:1",
        env=_odd(2, NO_AVX512),
        rank_wrapper=ODD,
    )
    assert job.rc == 0, job.describe()
    assert [e["worker"] for e in _events(job, "failure_detected")][:1] == [2], job.describe()
    (ranks,) = _events(job, "ranks")
    mine = ranks["numerics"]["driver"]
    assert mine["baseline"] == "x86-64-v3" and "X86_V4" not in mine["dispatch"]
    assert set(ranks["numerics"]["workers"].values()) == {mine["probe"]}, ranks
    assert not _events(job, "numerics_refused"), job.describe()
    assert same_fit(job.result, reference(*ARGS, 7)), job.describe()


@pytest.mark.parametrize("library", with_libraries([()], id_of=lambda row: "x"))
def test_a_rank_below_the_baseline_gets_no_shard(library, tmp_path, reference):
    """W = 4, rank 1 below x86-64-v3: it is refused (rank, host, what differs), its place is
    taken by a replacement under the baseline, and the bits are the homogeneous fit's."""
    _, python = library
    job = run_job(python, 5, fit_args(*ARGS), tmp_path, env=_odd(1, PRE_V3), rank_wrapper=ODD)
    assert job.rc == 0, job.describe()
    (refused,) = _events(job, "numerics_refused")
    assert refused["worker"] == 1 and "rank 1 on " in refused["why"], refused
    assert "numpy dispatch" in refused["why"] and "gets no shard" in refused["why"], refused
    assert same_fit(job.result, reference(*ARGS, 7)), job.describe()


def test_native_numerics_tells_an_odd_rank_apart(tmp_path):
    """--native-numerics: no baseline, so a rank without AVX-512 computes other bits than
    this machine's others; it is refused, and the job goes on."""
    job = run_job(
        OMPI_PYTHON,
        4,
        fit_args(*ARGS),
        tmp_path,
        env=_odd(1, NO_AVX512),
        rank_wrapper=ODD,
        launch=("--native-numerics",),
    )
    assert job.rc == 0, job.describe()
    (refused,) = _events(job, "numerics_refused")
    assert refused["worker"] == 1 and "X86_V4" in refused["why"], refused
    (ranks,) = _events(job, "ranks")
    assert ranks["numerics"]["driver"]["baseline"] == "native"
