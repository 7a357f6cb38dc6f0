"""Compatibility name: ``python -m mixle_mpi.collect`` lives in :mod:`mixle_mpi.cli.collect`; this name
stays a documented command."""

import sys

from mixle_mpi.cli.collect import main

if __name__ == "__main__":
    sys.exit(main())
