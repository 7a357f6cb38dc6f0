"""Decisions as plain Python over plain data, no MPI: membership, heartbeats and stalls,
placement, rounds, reconfiguration, fault plans, settings, and the simulation that drives
them. Imports only ``core``; never ``storage``, ``runtime``, ``fitting`` or ``cli``."""
