#!/bin/sh
# mixle_mpi rank wrapper for MPICH's Hydra (see README, "Which MPI"): Hydra sends SIGUSR1 to
# survivors when a rank dies and SIGKILLs everyone if a rank dies of a signal. Ignore USR1
# and run the rank as a child, so a worker killed by a signal ends this wrapper with 0 and
# the other ranks live on. The driver's (rank 0) own code is passed through unchanged.
trap '' USR1
"$@"
rc=$?
if [ "$rc" -gt 128 ] && [ "${PMI_RANK:-0}" != "0" ]; then exit 0; fi
exit $rc
