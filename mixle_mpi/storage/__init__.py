"""Files that outlive a process: the HDF5 shard store, checkpoints, the fold journal and the
event log. Imports only ``core``; never ``policy``, ``runtime``, ``fitting`` or ``cli``."""
