"""Processes by identity: the one place that asks the OS about a process, and the one place
that signals one.

A pid alone names nothing for long: it is reused once its process is reaped, and two
containers (or two hosts) can show the same pid. A process is named here by its identity,
``(pid, start)``: ``start`` is its start time since boot as text, exact to the clock tick,
so every process of a host computes the same text for it. (Two processes given one pid
within one tick, 10 ms, would look alike; the kernel hands pids out in turn, so that takes
``pid_max`` process starts in between.) An identity is valid only in the pid space
(``pid_space``) it was read in. Every signal to a pid goes through ``kill_same``, which
sends it only if the pid still names that process and that process is this user's; a
refusal is logged. All of it reads through psutil, so there is one reader of the process
table and one set of "gone" states (``GONE``).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable

import psutil

from mixle_mpi.core import logs

Ident = tuple[int, str]

# psutil's status names as the one-letter states of ``ps`` and /proc/PID/stat; the pure
# checks (launch/jobchecks, chaos/external_plan) speak in these letters.
_LETTERS = {
    psutil.STATUS_RUNNING: "R",
    psutil.STATUS_SLEEPING: "S",
    psutil.STATUS_DISK_SLEEP: "D",
    psutil.STATUS_STOPPED: "T",
    psutil.STATUS_TRACING_STOP: "t",
    psutil.STATUS_ZOMBIE: "Z",
    psutil.STATUS_DEAD: "X",
    psutil.STATUS_WAKING: "W",
    psutil.STATUS_IDLE: "I",
    psutil.STATUS_PARKED: "P",
}
GONE = frozenset(
    {"Z", "X", "x"}
)  # a process in one of these states has ended: never signal or count it
STOPPED = "T"

_ERRORS = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError)


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except _ERRORS:
        return None


def _start(p: psutil.Process) -> str | None:
    """Seconds from boot to the process's start, to the clock tick: its epoch start time less
    the boot time (both read here, so a clock step between two readers changes nothing)."""
    try:
        return f"{p.create_time() - psutil.boot_time():.2f}"
    except _ERRORS:
        return None


def identity(pid: int) -> Ident | None:
    """(pid, start): names one process for good, even after its pid is reused; None if there
    is no such process on this host (a zombie still has one)."""
    p = _process(pid)
    start = _start(p) if p is not None else None
    return (pid, start) if start is not None else None


def own() -> Ident | None:
    """This process's identity (``identity(os.getpid())``): for the records and messages
    that name it."""
    return identity(os.getpid())


def state(pid: int) -> str | None:
    """The state letter (R, S, T, Z, ...) of process ``pid``; None if there is none."""
    p = _process(pid)
    try:
        return _LETTERS.get(p.status(), "?") if p is not None else None
    except _ERRORS:
        return None


def gone(pid: int) -> bool:
    """``pid`` has ended on this host (no such process, or a zombie not yet reaped)."""
    return state(pid) in (None, *GONE)


def not_reaped(ident: Ident) -> bool:
    """The process ``ident`` names is still there (running, or a zombie not reaped yet)."""
    return identity(ident[0]) == ident


def running(ident: Ident) -> bool:
    """The process ``ident`` names is there and has not ended."""
    return not_reaped(ident) and state(ident[0]) not in (None, *GONE)


def ended(pid: int, start: str | None = None) -> bool:
    """The process ``pid`` started at ``start`` has ended: gone, a zombie, or its pid now names
    another process. Without ``start`` (a peer that did not send it) only ``pid`` is looked at."""
    return not running((pid, start)) if start else gone(pid)


def look(ident: Ident) -> tuple[str | None, float | None]:
    """The state letter and the CPU seconds (user + system) used so far of the process
    ``ident`` names; (None, None) once it is gone or its pid names another process."""
    p = _process(ident[0])
    if p is None or _start(p) != ident[1]:
        return None, None
    try:
        with p.oneshot():
            times = p.cpu_times()
            return _LETTERS.get(p.status(), "?"), times.user + times.system
    except _ERRORS:
        return None, None


def owner(pid: int) -> int | None:
    """The real uid of process ``pid``, if it can be read."""
    p = _process(pid)
    try:
        return p.uids().real if p is not None else None
    except _ERRORS:
        return None


def kill_same(ident: Ident, sig: int = signal.SIGKILL, why: str = "") -> bool | None:
    """Send ``sig`` to the process ``ident`` names, only if that pid still names it and it is
    this user's. True: sent; None: that process is gone already; False: refused (the pid
    names another process now, or another user's), with a log line that says so."""
    now = identity(ident[0])
    if now is None:
        return None
    refused = None
    if now != ident:
        refused = f"pid {ident[0]} now names another process (started at {now[1]}, not {ident[1]})"
    elif owner(ident[0]) != os.getuid():
        refused = f"pid {ident[0]} belongs to uid {owner(ident[0])}, not this job's {os.getuid()}"
    if refused is None:
        try:
            os.kill(ident[0], sig)
            return True
        except ProcessLookupError:
            return None
        except PermissionError:
            refused = f"pid {ident[0]} is not this user's to signal"
    logs.get("procs").warning(
        "did not send signal %s%s: %s", _signame(sig), f" ({why})" if why else "", refused
    )
    return False


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


def pid_space(proc: str = "/proc") -> str:
    """Which process-id space this process lives in: the kernel's boot id and its pid
    namespace. Two processes may look at each other's pids only when theirs are equal: two
    containers (or two machines) can share a host name, never a pid space. "" where it
    cannot be read (then only the host name tells)."""
    try:
        with open(os.path.join(proc, "sys", "kernel", "random", "boot_id"), encoding="ascii") as fh:
            boot = fh.read().strip()
        return f"{boot}:{os.stat(os.path.join(proc, 'self', 'ns', 'pid')).st_ino}"
    except OSError:
        return ""


def environ(pid: int) -> dict[str, str] | None:
    """The environment process ``pid`` started with; None if unreadable (gone, not ours)."""
    p = _process(pid)
    try:
        return p.environ() if p is not None else None
    except _ERRORS:
        return None


def cmdline(pid: int) -> list[str] | None:
    """The command line of process ``pid``; None if unreadable (or a kernel thread's, empty)."""
    p = _process(pid)
    try:
        return (p.cmdline() or None) if p is not None else None
    except _ERRORS:
        return None


def parent(pid: int) -> int | None:
    p = _process(pid)
    try:
        return p.ppid() if p is not None else None
    except _ERRORS:
        return None


def pids() -> frozenset[int]:
    """This host's process ids now."""
    try:
        return frozenset(psutil.pids())
    except OSError:
        return frozenset()


class Row:
    """One process as a table row: pid, parent, state letter, command line and environment."""

    __slots__ = ("pid", "ppid", "state", "argv", "env", "start")

    def __init__(
        self, pid: int, ppid: int, state: str, argv: tuple, env: dict, start: str | None
    ) -> None:
        self.pid, self.ppid, self.state, self.argv, self.env, self.start = (
            pid,
            ppid,
            state,
            argv,
            env,
            start,
        )


def table(env_of: Iterable[int] | None = None, env_if=None) -> dict[int, Row]:
    """This host's processes as ``pid -> Row``, read once. The environment is read for the
    pids in ``env_of`` (None: every process) and for those whose command line ``env_if``
    accepts; elsewhere it is ``{}``."""
    wanted = None if env_of is None else set(env_of)
    rows: dict[int, Row] = {}
    for p in psutil.process_iter(["ppid", "status", "cmdline"]):
        info = p.info
        if info.get("status") is None or info.get("ppid") is None:
            continue  # gone meanwhile
        argv = tuple(info.get("cmdline") or ())
        env: dict = {}
        if wanted is None or p.pid in wanted or (env_if is not None and env_if(argv)):
            try:
                env = p.environ()
            except _ERRORS:
                env = {}
        rows[p.pid] = Row(
            p.pid, info["ppid"], _LETTERS.get(info["status"], "?"), argv, env, _start(p)
        )
    return rows


def tagged(var: str, value: str, skip: Iterable[int] = ()) -> list[int]:
    """Pids of this host's processes whose environment has ``var=value`` (never our own)."""
    skip = {os.getpid(), *skip}
    found = []
    for pid in pids() - skip:
        env = environ(pid)
        if env is not None and env.get(var) == value:
            found.append(pid)
    return sorted(found)


def usable_cores() -> int:
    """The cores this process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
