"""Carries the policy's decisions out over MPI: startup, transport, heartbeats, the driver,
the worker, the handle, shrink and exit handling. Never imports ``fitting`` or ``cli``."""
