"""Files that hold the user's data or model state are the owner's alone (mode 0600).

The shard store is a full copy of the user's data; checkpoints and the fold journal hold
the model and its sufficient statistics. A shared cluster's ``/scratch`` is often world
readable, so they are created owner-only whatever the umask says.
"""

from __future__ import annotations

import os

PRIVATE = 0o600


def create_private(path: str) -> None:
    """Create (or truncate) ``path`` as an empty owner-only file, for h5py to open "w"
    (which keeps an existing file's mode)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE)
    try:
        os.fchmod(fd, PRIVATE)  # an existing file keeps its old mode through O_CREAT
    finally:
        os.close(fd)
