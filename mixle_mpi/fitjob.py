"""Compatibility name: ``python -m mixle_mpi.fitjob`` lives in :mod:`mixle_mpi.fitting.fitjob`;
this name stays the documented command (README, SLURM templates, users' job scripts)."""

from mixle_mpi.fitting.fitjob import main

if __name__ == "__main__":
    main()
