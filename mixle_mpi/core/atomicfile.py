"""Write a file so that a reader never sees half of it, and nobody can aim the write elsewhere.

Status files, fit results, summaries, reports, generated job scripts, checkpoints and the
shard store are read by other processes (the launcher, tests, ``mixle-mpi collect``, sbatch,
a rerun) that may look while a job is being killed. Every file mixle_mpi writes goes
through here: to a temporary name of its own in the same folder (created with
``O_EXCL | O_NOFOLLOW``, so neither another job's file nor a planted link is written
through), fsynced, renamed over the target (a rename replaces a link, never follows it),
and the folder fsynced, so that after a crash the file is the old one or the new one.
Outputs are the owner's alone (mode 0600, whatever the umask): results, summaries and
reports describe the user's data as much as the data itself does.
"""

from __future__ import annotations

import json
import os
import secrets
from contextlib import contextmanager

OWNER_ONLY = 0o600
NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def temp_path(path: str) -> str:
    """A name no other writer uses, beside ``path`` (the same file system, for the rename)."""
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")


def open_new(path: str, mode: int = 0o666) -> int:
    """A descriptor on a new file at ``path`` (``mode`` less the umask); never an existing
    file, never through a link."""
    return os.open(path, NEW, mode)


def fsync_dir(folder: str) -> None:
    """Make a rename in ``folder`` durable (best effort where folders cannot be opened)."""
    try:
        fd = os.open(folder or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def commit(tmp: str, path: str) -> None:
    """Rename the finished ``tmp`` over ``path`` and make it durable."""
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def discard(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass


@contextmanager
def replacing(path: str, mode: int = OWNER_ONLY):
    """A binary file to write ``path``'s new content into (for writers that want a file,
    such as matplotlib's ``savefig``): on leaving the block it is fsynced and renamed over
    ``path``; on an error it is removed and ``path`` is untouched. ``mode`` whatever the umask."""
    tmp = temp_path(path)
    fh = os.fdopen(open_new(tmp, mode), "wb")
    try:
        with fh:
            os.fchmod(fh.fileno(), mode)
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        commit(tmp, path)
    except BaseException:
        discard(tmp)
        raise


def write_text(path: str, text: str, mode: int = OWNER_ONLY) -> None:
    with replacing(path, mode) as fh:
        fh.write(text.encode("utf-8"))


def write_json(path: str, obj, indent: int | None = None) -> None:
    write_text(path, json.dumps(obj, indent=indent) + "\n")
