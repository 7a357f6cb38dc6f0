"""No process of a job outlives its launcher, however the launcher ends.

``mixle-mpi run`` marks every process it starts with ``MIXLE_MPI_JOB_TAG=<random>`` in the
environment (mpiexec passes it on to the ranks, respawned ones included) and starts this
reaper in a session of its own, holding the read end of a pipe. When the launcher ends
normally it sweeps the job itself and writes ``done``; when it is SIGKILLed (or its whole
process group is), the pipe closes without ``done`` and the reaper kills every process that
carries the tag: mpiexec, its daemons and the ranks, wherever they were reparented.
Only processes of this host can be found this way; mpiexec's daemons end the others.
"""

from __future__ import annotations

import os
import signal
import sys
import time

TAG_ENV = "MIXLE_MPI_JOB_TAG"
DONE = b"done"
# Seconds by which a process started on this host has shown itself in /proc (a fork and an
# exec take milliseconds, even on a loaded host) unless it died as it started.
APPEAR_WITHIN = 5.0


def tagged_pids(tag: str, proc: str = "/proc") -> list[int]:
    """Pids of this host's processes whose environment carries ``tag`` (never our own)."""
    needle = f"{TAG_ENV}={tag}".encode()
    found = []
    try:
        entries = os.listdir(proc)
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(os.path.join(proc, entry, "environ"), "rb") as fh:
                env = fh.read()
        except OSError:
            continue  # gone, or not ours to read
        if needle in env.split(b"\0"):
            found.append(int(entry))
    return sorted(found)


RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")  # a rank's world rank, set by its launcher
RANK_ENV = tuple(f"{v}=".encode() for v in RANK_VARS)


def world_rank(env) -> int | None:
    """The world rank a launcher gave the process whose environment is ``env``, if any."""
    for var in RANK_VARS:
        value = env.get(var)
        if value is not None and str(value).strip().lstrip("-").isdigit():
            return int(value)
    return None


def stat_fields(pid: int, proc: str = "/proc") -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state, ppid, ...); None if
    there is no such process on this host."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_state(pid: int, proc: str = "/proc") -> str | None:
    """The state letter (R, S, T, Z, ...) of process ``pid`` on this host; None if there is none."""
    fields = stat_fields(pid, proc)
    return fields[0] if fields else None


def identity(pid: int, proc: str = "/proc") -> tuple[int, str] | None:
    """(pid, start time): names one process for good, even after its pid is reused."""
    fields = stat_fields(pid, proc)
    return (pid, fields[19]) if fields and len(fields) > 19 else None


def not_reaped(ident: tuple[int, str], proc: str = "/proc") -> bool:
    """The process ``ident`` names is still there (running, or a zombie its parent has not
    reaped yet)."""
    return identity(ident[0], proc) == ident


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


def kill_same(ident: tuple[int, str], sig: int = signal.SIGKILL, proc: str = "/proc") -> bool | None:
    """Send ``sig`` to the process ``ident`` (pid, start time) names, only if that pid still
    names it: a pid reused by another process is never signalled. True: sent; None: that
    process is gone already; False: refused (the pid names another process now, or it is
    not ours to signal)."""
    now = identity(ident[0], proc)
    if now is None:
        return None
    if now != ident:
        return False
    try:
        os.kill(ident[0], sig)
    except ProcessLookupError:
        return None
    except PermissionError:
        return False
    return True


def process_gone(pid: int, proc: str = "/proc") -> bool:
    """True if ``pid`` has ended on this host (no such process, or a zombie not yet reaped).
    Without /proc (not Linux) it says False: the caller's own deadline then decides."""
    if not os.path.isdir(proc):
        return False
    return process_state(pid, proc) in (None, "Z", "X")


def rank_states(tag: str, proc: str = "/proc") -> dict[int, str]:
    """The state letter (R, S, T, Z, ...) of each Python rank process of the job: tagged,
    with an MPI rank in its environment (not mpiexec, its daemons or a shell wrapper)."""
    out = {}
    for pid in tagged_pids(tag, proc):
        try:
            with open(os.path.join(proc, str(pid), "comm"), encoding="utf-8") as fh:
                if not fh.read().startswith("python"):
                    continue
            with open(os.path.join(proc, str(pid), "environ"), "rb") as fh:
                env = fh.read()
            if not any(v in env for v in RANK_ENV):
                continue
        except OSError:
            continue  # gone meanwhile
        state = process_state(pid, proc)
        if state is not None:
            out[pid] = state
    return out


def rank_number(pid: int, proc: str = "/proc") -> int | None:
    """The MPI rank a rank process was started as (from its environment), if readable."""
    try:
        with open(os.path.join(proc, str(pid), "environ"), "rb") as fh:
            entries = fh.read().split(b"\0")
    except OSError:
        return None
    env = dict(e.decode(errors="replace").split("=", 1) for e in entries if b"=" in e)
    return world_rank(env)


def kill_tagged(tag: str, sig: int = signal.SIGKILL) -> list[int]:
    """Send ``sig`` to every process carrying ``tag``; returns the pids signalled."""
    hit = []
    for pid in tagged_pids(tag):
        try:
            os.kill(pid, sig)
            hit.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    return hit


def sweep(tag: str, grace: float) -> list[int]:
    """Give the job's processes ``grace`` seconds to end by themselves, then kill the rest
    (several passes, for processes started meanwhile). Returns the pids killed."""
    end = time.monotonic() + grace
    while tagged_pids(tag) and time.monotonic() < end:
        time.sleep(0.1)
    killed: list[int] = []
    for _ in range(5):
        hit = kill_tagged(tag)
        if not hit:
            break
        killed += hit
        time.sleep(0.2)
    return sorted(set(killed))


def main(argv: list[str]) -> int:
    tag = argv[0]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to the terminal is the launcher's
    try:
        said = sys.stdin.buffer.read()  # returns when the launcher closes the pipe, or dies
    except OSError:
        said = b""
    if said.strip() == DONE:
        return 0
    killed = sweep(tag, grace=0.0)
    if killed:
        sys.stderr.write(f"[mixle_mpi] the launcher is gone: killed the job's {len(killed)} remaining processes\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
