"""Failure-free exactness: bit-identical to mixle's own ResilientMPEncodedData on several
models, and independent of the number of MPI ranks, with the default layout too."""

from __future__ import annotations

import pytest
from conftest import with_libraries
from mpiharness import OMPI_PYTHON, fit_args, run_job, same_fit

pytestmark = pytest.mark.mpijob

CASES = [
    # model, n, shards, sub_chunks
    ("gmm1d", 5000, 3, 1),
    ("diag", 3000, 3, 2),
    ("full", 2000, 3, 1),
    ("poisson", 4000, 3, 2),
    ("hmm", 400, 3, 1),
    ("composite", 3000, 3, 2),
]


@pytest.mark.parametrize(
    "model,n,shards,sub", CASES, ids=[c.values[0] if hasattr(c, "values") else c[0] for c in CASES]
)
def test_matches_mixle_resilient_mp(model, n, shards, sub, tmp_path, reference):
    """The job's bits are mixle's own multiprocessing backend's, and so are those of the
    in-process reference (``ShardsInProcess``) every other test compares with."""
    job = run_job(OMPI_PYTHON, 4, fit_args(model, n, shards, sub, 5), tmp_path)
    assert job.rc == 0, job.describe()
    mixles = reference(model, n, shards, sub, 5, 7, mixles=True)
    assert same_fit(job.result, mixles), job.describe()
    assert same_fit(reference(model, n, shards, sub, 5, 7), mixles)


# the same bits from 2, 4 and 8 workers
@pytest.mark.parametrize("library, ranks", with_libraries([(3,), (5,), (9,)]))
def test_bits_do_not_depend_on_rank_count(library, ranks, tmp_path, reference):
    """No --num-shards: the default S comes from the rows alone (2500 rows: 16 shards), so 2,
    4 or 8 workers give the same bits, the same as mixle's with S = 16."""
    from mixle_mpi.core.layout import default_num_shards

    _, python = library
    job = run_job(
        python,
        ranks,
        fit_args("diag", 2500, None, 2, 5),
        tmp_path,
        env={"MIXLE_MPI_ALLOW_MANY_RANKS": "1"},
    )  # 9 ranks: more than 4 per core here
    assert job.rc == 0, job.describe()
    assert job.result["num_shards"] == default_num_shards(2500) == 16
    assert same_fit(job.result, reference("diag", 2500, 16, 2, 5, 7)), job.describe()


def test_long_estep_is_not_a_death(tmp_path):
    """One shard computes for longer than the heartbeat timeout: heartbeats come from a
    separate thread, so no worker is declared dead."""
    env = {"MIXLE_MPI_HEARTBEAT_PERIOD": "0.05", "MIXLE_MPI_HEARTBEAT_TIMEOUT": "0.25"}
    job = run_job(OMPI_PYTHON, 3, fit_args("diag", 1_500_000, 2, 1, 2), tmp_path, env=env)
    assert job.rc == 0, job.describe()
    slowest = max(r["seconds"] for r in job.result["rounds"] if r["kind"] == "estep")
    assert slowest > 0.25, f"the E-step ({slowest:.2f} s) was too short to test anything"
    assert not [e for e in job.events if e["event"] == "failure_detected"], job.describe()
    assert all(not r["recomputed"] for r in job.result["rounds"])
