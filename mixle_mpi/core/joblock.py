"""One job per folder: an exclusive lock on the folder, held for the life of the process.

Two fits on one output folder once both ran to the end with exit 0, writing the same files,
and one's clean close deleted the other's shard store. The driver now takes an ``fcntl``
lock on a lock file in its output and work folders before it writes anything there. A
second job is refused at once, with an error that names the first (host, pid and start
time, from the lock file). The kernel releases a lock when its process ends, so a lock file
left by a dead job is simply taken over, and the takeover is said. A survivor that takes
over from a dead driver (failover) takes its locks over the same way.

A checkpoint is locked the same way, by its own lock file beside it (``.<name>.lock``): two
fits with different output folders and the same ``--checkpoint`` once both ran and rotated
each other's files.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time

from mixle_mpi.core import procs
from mixle_mpi.core.errors import ConfigError

LOCK_NAME = ".mixle_mpi.lock"
_held: dict[str, int] = {}  # lock file (real path) -> the open descriptor that holds its lock


class FolderBusy(ConfigError):
    """Another live job holds the folder."""


def hold(folder: str, what: str) -> str | None:
    """Take ``folder``'s lock for this process (again: nothing to do). Returns a line to log
    when a dead job's lock file was taken over, else None. Raises ``FolderBusy`` naming the
    job that holds it."""
    return _hold(os.path.join(folder, LOCK_NAME), f"the {what} folder", folder)


def lock_path_of(path: str) -> str:
    """The lock file of the file ``path`` (a checkpoint): hidden, beside it (pure)."""
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}.lock")


def hold_file(path: str, what: str) -> str | None:
    """``hold`` for one file (a checkpoint and its siblings) rather than a folder."""
    return _hold(lock_path_of(path), f"the {what}", path)


def _hold(path: str, what: str, name: str) -> str | None:
    key = os.path.realpath(path)
    if key in _held:
        return None
    try:
        fd = os.open(
            path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600
        )
    except OSError as exc:
        raise ConfigError(f"cannot lock {what} {name!r}: {exc.strerror} ({path})") from None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        other = _read(fd)
        os.close(fd)
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise ConfigError(f"cannot lock {what} {name!r}: {exc.strerror} ({path})") from None
        raise _busy(name, what, other) from None
    previous = _read(fd)
    _write(fd)
    _held[key] = fd
    if previous:
        return f"took over {what} {name}: the job that held it ({describe(previous)}) has ended"
    return None


def check_free(folder: str, what: str) -> None:
    """Before launching a job on ``folder``: raise ``FolderBusy`` at once if a live job holds
    it (the driver takes the lock itself later; this only saves starting MPI for nothing)."""
    _check_free(os.path.join(folder, LOCK_NAME), f"the {what} folder", folder)


def check_file_free(path: str, what: str) -> None:
    """``check_free`` for one file's lock (``hold_file``)."""
    _check_free(lock_path_of(path), f"the {what}", path)


def _check_free(path: str, what: str, folder: str) -> None:
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return  # no lock file (or none of ours): the driver decides
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            raise _busy(folder, what, _read(fd)) from None
    finally:
        os.close(fd)  # also lets go of the lock just taken


def release_all() -> None:
    """Let every folder go (a process that goes on after its fit, such as a test)."""
    for fd in _held.values():
        os.close(fd)
    _held.clear()


def _busy(name: str, what: str, other: dict | None) -> FolderBusy:
    own = "--checkpoint" if what.endswith("checkpoint") else "--out-dir"
    return FolderBusy(
        f"{what} {name!r} is in use by another job ({describe(other)}); "
        f"give this job one of its own ({own}), or wait for that job to end"
    )


def describe(record: dict | None) -> str:
    """``host vm, pid 123, started 2026-12-04 17:10:02`` from a lock file's record (pure)."""
    if not record:
        return "host and pid unknown"
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record["time"]))
        if "time" in record
        else "?"
    )
    return f"host {record.get('host', '?')}, pid {record.get('pid', '?')}, started {when}"


def _read(fd: int) -> dict | None:
    try:
        data = os.pread(fd, 4096, 0)
        record = json.loads(data.decode("utf-8")) if data.strip() else None
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _write(fd: int) -> None:
    ident = procs.own()
    record = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "start": ident[1] if ident else "",
        "time": time.time(),
    }
    data = (json.dumps(record) + "\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    os.fsync(fd)
