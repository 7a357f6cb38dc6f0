"""Deterministic chaos, the actor: the hook a rank fires its planned faults with.

A rank holds a ``FaultInjector`` for its place and incarnation and calls ``check`` at fixed
points of its code; a matching fault (``chaos/fault_plan``) is recorded, then carried out on
the process itself: SIGKILL, SIGSTOP, an exit, a main thread blocked for good, a delay, or a
slowdown of every later shard.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import asdict

from mixle_mpi.chaos.fault_plan import (
    DELAY_SECONDS,
    FIRED_ENV,
    SPAWN_PHASE,
    Fault,
    pending_from_env,
    started_by_spawn,
)
from mixle_mpi.core import logs
from mixle_mpi.core.exitcodes import FAULT_EXIT


class FaultInjector:
    """Held by one worker process; fires the matching fault on itself, at most once each."""

    def __init__(self, plan, worker: int, incarnation: int) -> None:
        self.plan = tuple(plan)
        self.worker, self.incarnation = worker, incarnation
        self._fired: set[int] = set()
        self.slowdown = 1.0  # a "slow" fault fired: each shard takes this many times as long

    def check(self, phase: str, call: int = 0, recovery: bool = False) -> None:
        for i, fault in enumerate(self.plan):
            if i not in self._fired and fault.matches(
                self.worker, self.incarnation, phase, call, recovery
            ):
                self._fired.add(i)
                if (
                    fault.action == "slow"
                ):  # the worker's task loop stretches each shard from now on
                    _announce(fault)
                    self.slowdown = float(fault.factor)
                else:
                    _perform(fault)


def fired_record(fault: Fault) -> dict:
    """What the victim records about itself, just before it acts."""
    return {
        "time": round(time.time(), 6),
        "event": "fault_fired",
        **asdict(fault),
        "pid": os.getpid(),
        "host": socket.gethostname(),
    }


def record_fired(fault: Fault, path: str | None = None) -> None:
    """Append the record to ``path`` (default ``$MIXLE_MPI_FAULT_LOG``; nothing if unset) with
    one ``write`` on an ``O_APPEND`` descriptor, then fsync, so that the line is on disk before
    the process kills or stops itself and whole even when several ranks share the file."""
    path = path if path is not None else os.environ.get(FIRED_ENV)
    if not path:
        return
    line = (json.dumps(fired_record(fault)) + "\n").encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:  # the fault still acts; the missing record then fails the run
        logs.get("faults").error(f"chaos: cannot record the fault in {path!r}: {exc}")


def _announce(fault: Fault) -> None:
    record_fired(fault)
    sys.stdout.flush()
    slow = f" x{fault.factor:g}" if fault.action == "slow" else ""
    logs.get("faults").warning(
        f"chaos: worker {fault.worker} {fault.action}{slow} at {fault.phase} (call {fault.call}) "
        f"pid={os.getpid()}"
    )


def _perform(fault: Fault) -> None:
    _announce(fault)
    if fault.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault.action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif fault.action == "hang":  # blocked in a C-level lock wait: the GIL is free, beats go on
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()
    elif fault.action == "delay":
        time.sleep(DELAY_SECONDS)
    else:
        os._exit(FAULT_EXIT)


def spawn_fault_check() -> None:
    """In a replacement process, before MPI initialisation: the first pending spawn fault."""
    if started_by_spawn():
        FaultInjector(pending_from_env((SPAWN_PHASE,))[:1], 0, 1).check(SPAWN_PHASE)
