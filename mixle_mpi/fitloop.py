"""Compatibility name: ``mixle_mpi.fitloop.fit`` is ``mixle_mpi.fit`` (the checkpointed EM loop,
:mod:`mixle_mpi.fitting.fitloop`); new code imports it from ``mixle_mpi``."""

from mixle_mpi.fitting.fitloop import fit  # noqa: F401
