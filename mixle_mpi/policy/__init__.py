"""Decisions as plain Python over plain data, no MPI: membership, heartbeats and stalls,
placement, rounds, reconfiguration, fault plans and settings (``mixle_mpi.sim`` runs the
driver that carries them out in a simulated world). Imports only ``core``; never ``storage``, ``runtime``, ``fitting`` or ``cli``."""
