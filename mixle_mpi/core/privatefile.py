"""Files that hold the user's data or model state are the owner's alone (mode 0600).

The shard store is a full copy of the user's data; checkpoints and the fold journal hold
the model and its sufficient statistics. A shared cluster's ``/scratch`` is often world
readable, so they are created owner-only whatever the umask says, and never through a link.
"""

from __future__ import annotations

import os

from mixle_mpi.core.atomicfile import open_new, temp_path

PRIVATE = 0o600


def create_private(path: str) -> None:
    """Create (or truncate) ``path`` as an empty owner-only file, for h5py to open "w"
    (which keeps an existing file's mode); a link at ``path`` is refused, not followed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, PRIVATE)
    try:
        os.fchmod(fd, PRIVATE)  # an existing file keeps its old mode through O_CREAT
    finally:
        os.close(fd)


def new_private_temp(path: str) -> str:
    """A new, empty, owner-only file under a name of its own beside ``path``, to be written
    (by h5py) and then renamed over ``path`` (``atomicfile.commit``)."""
    tmp = temp_path(path)
    fd = open_new(tmp, PRIVATE)
    try:
        os.fchmod(fd, PRIVATE)  # whatever the umask
    finally:
        os.close(fd)
    return tmp
