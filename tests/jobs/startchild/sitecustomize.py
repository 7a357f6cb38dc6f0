"""Make one rank of a test job run a child process while it starts, before MPI is up.

Put this folder on ``PYTHONPATH`` and set ``MIXLE_MPI_TEST_CHILD_RANK`` to a rank's number (its
MPI rank at launch) and ``MIXLE_MPI_TEST_CHILD_LOG`` to a file: that rank of the built-in fit
runs ``sleep``-like Python for ``MIXLE_MPI_TEST_CHILD_SECONDS`` (default 4) first, as a user's
script that asks ``git`` or ``nvidia-smi`` something would, and the child appends its pid to
the log. The child inherits the rank's environment, so the launcher's looks take it for the
rank while it runs. Test-only; the processes stay real ranks under mpiexec.
"""

import os
import subprocess
import sys


def _is_the_rank() -> bool:
    """That rank of the built-in fit (not mpiexec's helpers, nor the children it starts)."""
    want = os.environ.get("MIXLE_MPI_TEST_CHILD_RANK", "")
    rank = os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("PMI_RANK")
    return bool(want) and rank == want and "mixle_mpi.fitting.fitjob" in sys.orig_argv


if _is_the_rank():
    seconds = float(os.environ.get("MIXLE_MPI_TEST_CHILD_SECONDS", "4"))
    code = (
        "import os, sys, time\n"
        "with open(sys.argv[1], 'a') as f: f.write(f'{os.getpid()}\\n')\n"
        "time.sleep(float(sys.argv[2]))\n"
    )
    log = os.environ.get("MIXLE_MPI_TEST_CHILD_LOG", os.devnull)
    subprocess.run([sys.executable, "-c", code, log, str(seconds)], check=False, timeout=60)
