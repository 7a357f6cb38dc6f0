"""Give one rank of a test job another CPU's numerics, before anything imports numpy.

Put this folder on ``PYTHONPATH`` and set ``MIXLE_MPI_TEST_ODD_RANK`` to a rank's number (its
MPI rank at launch) or to ``spawned`` (every rank started once the fit had started: a
replacement, whichever entry the driver starts it with): that process
gets ``MIXLE_MPI_TEST_ODD_NPY`` added to its ``NPY_DISABLE_CPU_FEATURES``, as a node without
AVX-512 (or an older one) would have: added, not set, so that under the job's baseline (which
disables more) it lacks what the baseline disables too, as a real older node would. Test-only;
the processes stay real ranks under mpiexec.
"""

import os


def _odd() -> bool:
    want = os.environ.get("MIXLE_MPI_TEST_ODD_RANK", "")
    if not want:
        return False
    try:
        with open("/proc/self/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    if not any(
        b"mixle_mpi.runtime.replacement_entry" in a or b"mixle_mpi.fitting.fitjob" in a
        for a in argv
    ):
        return False  # the launcher, mpiexec's helpers, the reaper: not ranks
    started = os.environ.get("MIXLE_MPI_STARTED_FILE", "")
    if started and os.path.exists(started):  # the fit had started: a replacement
        return want == "spawned"
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", ""))
    return rank == want


if _odd():
    _have = os.environ.get("NPY_DISABLE_CPU_FEATURES", "").split()
    _more = os.environ.get("MIXLE_MPI_TEST_ODD_NPY", "").split()
    os.environ["NPY_DISABLE_CPU_FEATURES"] = " ".join(dict.fromkeys(_have + _more))
