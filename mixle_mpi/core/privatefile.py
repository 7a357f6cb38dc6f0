"""Files that hold the user's data or model state are the owner's alone (mode 0600).

The shard store is a full copy of the user's data; checkpoints and the fold journal hold
the model and its sufficient statistics. A shared cluster's ``/scratch`` is often world
readable, so they are created owner-only whatever the umask says, and never through a link.
"""

from __future__ import annotations

import os

from mixle_mpi.core.atomicfile import OWNER_ONLY, open_new, temp_path

PRIVATE = OWNER_ONLY
APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


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


def open_private_append(path: str):
    """``path`` opened to append text (made owner-only if new, and if this user's); a link
    at ``path`` is refused, not followed (an event log appended over reruns)."""
    fd = os.open(path, APPEND, PRIVATE)
    try:
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, PRIVATE)  # one left by an older version keeps its mode otherwise
        return os.fdopen(fd, "a", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def new_private_file(path: str, text: str) -> None:
    """Create ``path`` (it must not exist) owner-only, holding ``text``; never through a link."""
    fd = open_new(path, PRIVATE)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        os.fchmod(fd, PRIVATE)
        fh.write(text)
