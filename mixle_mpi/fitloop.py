"""Compatibility name: ``mixle_mpi.fitloop.fit`` (the public checkpointed EM loop) lives in
:mod:`mixle_mpi.fitting.fitloop`."""

from mixle_mpi.fitting.fitloop import fit  # noqa: F401
