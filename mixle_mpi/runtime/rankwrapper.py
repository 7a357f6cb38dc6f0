"""Where the MPICH rank wrapper (rankwrap.sh) lives: the launcher starts every rank through
it, and the driver starts a respawned worker through it (see rankwrap.sh for why)."""

from __future__ import annotations

from importlib import resources


def wrapper_path() -> str:
    return str(resources.files("mixle_mpi.runtime").joinpath("rankwrap.sh"))
