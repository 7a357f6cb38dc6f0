"""No process of a job outlives its launcher, however the launcher ends.

``mixle-mpi run`` marks every process it starts with ``MIXLE_MPI_JOB_TAG=<random>`` in the
environment (mpiexec passes it on to the ranks, respawned ones included) and starts this
reaper in a session of its own, holding the read end of a pipe. When the launcher ends
normally it sweeps the job itself and writes ``done``; when it is SIGKILLed (or its whole
process group is), the pipe closes without ``done`` and the reaper kills every process that
carries the tag: mpiexec, its daemons and the ranks, wherever they were reparented.
Only processes of this host can be found this way; mpiexec's daemons end the others. Then
it removes the launch's run folder (given after the tag), which the launcher would have.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time

from mixle_mpi.core import procs
from mixle_mpi.launch import ranks
from mixle_mpi.launch.contract import TAG_ENV

DONE = b"done"
# Seconds by which a process started on this host has shown itself in the process table (a fork and an
# exec take milliseconds, even on a loaded host) unless it died as it started.
APPEAR_WITHIN = 5.0


def tagged_pids(tag: str) -> list[int]:
    """Pids of this host's processes whose environment carries ``tag`` (never our own)."""
    return procs.tagged(TAG_ENV, tag)


def rank_states(tag: str) -> dict[int, str]:
    """The state letter (R, S, T, Z, ...) of each rank process of the job: tagged, with an
    MPI rank in its environment, and not a wrapper around another (``ranks.rank_processes``:
    mpiexec, its daemons and shell wrappers are left out, whatever runs the rank)."""
    pids = tagged_pids(tag)
    rows = procs.table(env_of=pids)
    return {pid: rows[pid].state for pid in ranks.rank_processes(rows, pids)}


def rank_number(pid: int) -> int | None:
    """The MPI rank a rank process was started as (from its environment), if readable."""
    env = procs.environ(pid)
    return ranks.world_rank(env) if env is not None else None


def kill_tagged(tag: str, sig: int = signal.SIGKILL) -> list[int]:
    """Send ``sig`` to every process carrying ``tag``, each by its identity (a pid reused
    meanwhile is left alone); returns the pids signalled."""
    hit = []
    for pid in tagged_pids(tag):
        ident = procs.identity(pid)
        if ident is not None and procs.kill_same(ident, sig, why="the job's leftover"):
            hit.append(pid)
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


def remove_run_folder(path: str) -> bool:
    """Remove ``path`` if it is a run folder the launcher made (its name, a real folder of
    this user's, not a link): the reaper is given it on its command line. True if removed."""
    name = os.path.basename(os.path.normpath(path))
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not name.lstrip(".").startswith("mixle_mpi_run_") or not os.path.isdir(path):
        return False
    if os.path.islink(path) or st.st_uid != os.getuid():
        return False
    shutil.rmtree(path, ignore_errors=True)
    return True


def main(argv: list[str]) -> int:
    tag, run_dirs = argv[0], argv[1:]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to the terminal is the launcher's
    try:
        said = sys.stdin.buffer.read()  # returns when the launcher closes the pipe, or dies
    except OSError:
        said = b""
    if said.strip() == DONE:
        return 0
    killed = sweep(tag, grace=0.0)
    for path in run_dirs:
        remove_run_folder(path)
    if killed:
        sys.stderr.write(
            f"[mixle_mpi] the launcher is gone: killed the job's {len(killed)} remaining processes\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
