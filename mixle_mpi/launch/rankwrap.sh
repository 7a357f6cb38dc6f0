#!/bin/sh
# mixle_mpi rank wrapper for MPICH's Hydra (see README, "Which MPI"): Hydra sends SIGUSR1 to
# survivors when a rank dies and SIGKILLs everyone if a rank dies of a signal. Ignore USR1
# and run the rank as a child, so a worker killed by a signal ends this wrapper with 0 and
# the other ranks live on. The driver's (rank 0) own code is passed through unchanged.
# A respawned worker is rank 0 of its own world, so the driver starts it with --worker.
trap '' USR1
worker=0
if [ "${1:-}" = "--worker" ]; then worker=1; shift; fi
if [ "${PMI_RANK:-0}" != "0" ]; then worker=1; fi
# The rank keeps this wrapper's stderr (fd 3); the wrapper's own job report ("Killed", when a
# chaos test or the driver's fence SIGKILLs a worker) goes nowhere: the driver logs the death.
exec 3>&2 2>/dev/null
( "$@" 2>&3 3>&- )
rc=$?
if [ "$rc" -gt 128 ] && [ "$worker" = "1" ]; then exit 0; fi
exit $rc
