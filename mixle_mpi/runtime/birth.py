"""A replacement's birth record: which process it is, written as it starts, before its MPI
initialisation.

A replacement that dies while the driver's ``MPI_Comm_spawn`` starts it leaves that Spawn
stuck for good, under Open MPI and MPICH alike. Without this record the driver learns it only
at ``reconfigure_timeout`` (60 s by default): a minute with one worker fewer under Open MPI,
a minute before exit 74 under MPICH. With it the driver sees the process is gone and gives
up on the Spawn at once. Before the record is written (the interpreter's first 0.1 s) the
driver finds the process by its command line, which names the record (``SpawnDeathCheck``); one
killed before any look found it (an external campaign killed replacements 16 ms after they
appeared) is given up once it has not been seen within ``APPEAR_WITHIN``, where it surely
starts on this host. A record it cannot read (another host, no /proc) only costs that.
Records live in the job's private run folder (``core/rundir.py``) under a random name, and
one is believed only if it is a regular file of this user: a planted record names no process.
"""

from __future__ import annotations

import os
import socket
import sys
import time

from mixle_mpi.core import procs, rundir
from mixle_mpi.launch.reaper import APPEAR_WITHIN

ARG = "--birth"  # the replacement's argument naming where it writes the record
DRIVER_ARG = "--driver"  # the replacement's argument naming the driver's process: PID,START,SPACE


def driver_arg() -> str:
    """This process (the driver), as a replacement is told it: ``PID,START,SPACE``."""
    ident = procs.own()
    return f"{os.getpid()},{ident[1] if ident else ''},{procs.pid_space()}"


def parse_driver(text: str | None) -> tuple[int, str] | None:
    """The driver's identity from ``driver_arg``'s text, if its pid means something here (the
    same pid space); else None."""
    try:
        pid, start, space = (text or "").split(",")
        ident = (int(pid), start)
    except ValueError:
        return None
    return ident if start and space and space == procs.pid_space() else None


def write(path: str) -> None:
    """In the replacement, first thing: this host, pid and start time (the pid's identity)."""
    ident = procs.own()
    if ident is None:
        return
    try:
        rundir.create_new(
            path, f"{socket.gethostname()} {ident[0]} {ident[1]} {procs.pid_space() or '-'}\n"
        )
    except OSError as exc:  # another host, which cannot see the driver's run folder
        sys.stderr.write(
            f"[mixle_mpi] replacement pid {os.getpid()}: no birth record at {path} "
            f"({exc.strerror}); the driver falls back on the Spawn's deadline\n"
        )


def read(path: str) -> tuple[str, tuple[int, str]] | None:
    """(host, identity) from a record, or None while there is none (or it is not one). The
    host is "" when the record's process lives in another pid space than this one (another
    container that shares the host name): its pid means nothing here."""
    text = rundir.read_trusted(path)  # a regular file of this user, or nothing
    try:
        host, pid, start, space = (text or "").split()
        ident = (int(pid), start)
    except ValueError:
        return None  # none yet, half written, or not one
    return (host if space == (procs.pid_space() or "-") else ""), ident


def verdict(record: tuple[str, tuple[int, str]] | None, here: str, still_there) -> str | None:
    """Why the replacement is known dead, or None: no record yet, a process on another host
    (its death is not visible from here), or one ``still_there(identity)`` says runs."""
    if record is None or record[0] != here or still_there(record[1]):
        return None
    return f"its process (pid {record[1][0]}) died before it had joined MPI"


def identity_here(path: str) -> tuple[int, str] | None:
    """The (pid, start time) the record at ``path`` names, if it is a process of this host
    (whose end the driver can then see while the replacement joins), else None."""
    record = read(path)
    return record[1] if record and record[0] == socket.gethostname() else None


def died(path: str) -> tuple[int, str] | None:
    """(pid, why) when the record at ``path`` names a process of this host that is gone
    (``verdict``), else None."""
    record = read(path)
    why = verdict(record, socket.gethostname(), procs.running)
    return (record[1][0], why) if record and why else None


def remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


SCAN_EVERY = 0.02  # seconds between looks for the processes that name a record not written yet


def named(path: str, skip: frozenset[int] = frozenset()) -> list[tuple[int, str]]:
    """Identities of this host's processes whose command line holds ``path``: the replacement
    from its exec on (and under MPICH its rank wrapper, which ends with it). ``skip``: pids
    older than the Spawn, whose command lines need no reading."""
    found = []
    for pid in procs.pids() - skip:
        argv = procs.cmdline(pid)
        if not argv or not any(path in a for a in argv):
            continue
        ident = procs.identity(pid)
        if ident is not None:
            found.append(ident)
    return found


class SpawnDeathCheck:
    """One replacement's process while its Spawn runs: by its record once written; until then
    by the processes whose command line names the record (looked for every ``SCAN_EVERY``).
    ``here``: the process surely starts on this host, so one never seen within
    ``APPEAR_WITHIN`` died as it started (or never started)."""

    def __init__(self, path: str, here: bool = False, clock=time.monotonic) -> None:
        self.path, self.here, self.clock = path, here, clock
        self.seen: set[tuple[int, str]] = set()
        self.older = (
            procs.pids()
        )  # before the Spawn: a scan then reads a few new command lines, not all
        self.began = clock()
        self._next_scan = 0.0

    def dead(self) -> tuple[int | None, str] | None:
        """(pid, why) once the process is known gone (pid None: it was never seen), else None."""
        if os.path.exists(self.path):
            return died(self.path)
        now = self.clock()
        if now >= self._next_scan:
            self._next_scan = now + SCAN_EVERY
            self.seen.update(named(self.path, self.older))
        if self.seen and not any(procs.running(i) for i in self.seen):
            pid = min(self.seen)[0]
            return pid, f"its process (pid {pid}) died before it had joined MPI"
        if self.here and not self.seen and now - self.began > APPEAR_WITHIN:
            return None, (
                f"its process was not seen on this host within {APPEAR_WITHIN:g} s of the Spawn "
                "(it died as it started, or never started)"
            )
        return None
