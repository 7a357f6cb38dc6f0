"""Run a module as one rank of a test job, and give rank ``MIXLE_MPI_TEST_ODD_RANK`` another
CPU's numerics: ``MIXLE_MPI_TEST_ODD_NPY`` becomes its ``NPY_DISABLE_CPU_FEATURES`` before
numpy is imported (a node without AVX-512, or an older one). Test-only: the rank is a real
process under mpiexec, started by ``mixle-mpi run`` like any other.

    python tests/jobs/oddcpu.py MODULE ARGS...
"""

import os
import runpy
import sys

rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", ""))
if rank and rank == os.environ.get("MIXLE_MPI_TEST_ODD_RANK"):
    os.environ["NPY_DISABLE_CPU_FEATURES"] = os.environ.get("MIXLE_MPI_TEST_ODD_NPY", "")
module = sys.argv[1]
sys.argv = [module, *sys.argv[2:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
