"""Compatibility name: ``python -m mixle_mpi.slurm`` lives in :mod:`mixle_mpi.cli.slurm`; this name
stays a documented command."""

import sys

from mixle_mpi.cli.slurm import main

if __name__ == "__main__":
    sys.exit(main())
