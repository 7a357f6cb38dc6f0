"""Structured event log (JSON lines) plus one human line on stderr per event.

Every detection, shrink, recovery, respawn and blacklisting is written with the worker's
rank, host and pid, the wall time and the cause, so an operator can tell what happened to
which rank after the fact (``mixle-mpi inspect`` and plain ``jq`` both read it).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import Any

from mixle_mpi.core import logs
from mixle_mpi.core.privatefile import open_private_append

LOG = object()  # EventLog's default echo: a line through the logging module

# What a person needs to see at the default level (INFO). A checkpoint is folded into the
# progress line and a fallback into the "resumed" line, so they only show with -v.
LEVELS = {
    "failure_detected": logging.WARNING,
    "suspected": logging.INFO,
    "relaunched": logging.WARNING,
    "blacklisted": logging.WARNING,
    "spawn_unavailable": logging.WARNING,
    "spawn_abandoned": logging.WARNING,
    "driver_failed": logging.WARNING,
    "failover_unavailable": logging.WARNING,
    "checkpoint": logging.DEBUG,
    "checkpoint_fallback": logging.DEBUG,
    "closed": logging.DEBUG,
    "shrink_fallback": logging.DEBUG,
    "preempted": logging.DEBUG,
    "loaded": logging.DEBUG,
}
SKIP = {"time", "event", "worker", "pid", "host", "driver_host"}


class EventLog:
    """Append-only JSON-lines writer; flushed per event so a killed job keeps its history.

    Each event is also echoed as one human line: through the logging module (``echo=LOG``,
    the default, at the event's level in :data:`LEVELS`), to a stream, or not at all (None).
    """

    def __init__(self, path: str | None, echo: Any = LOG) -> None:
        self.path = path
        self.echo = echo
        self._fh = None
        self.events: list[dict[str, Any]] = []
        if path:
            parent = os.path.dirname(os.path.abspath(path))
            os.makedirs(parent, exist_ok=True)
            torn = _ends_torn(path)
            self._fh = open_private_append(path)  # lives as long as the log
            if torn:  # a killed writer's cut line stays a line of its own
                self._fh.write("\n")

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        record = {"time": round(time.time(), 6), "event": event, **fields}
        record.setdefault("driver_host", socket.gethostname())
        self.events.append(record)
        if self._fh is not None:
            self._fh.write(json.dumps(record, default=str) + "\n")
            self._fh.flush()
        if self.echo is LOG:
            logs.get("events").log(LEVELS.get(event, logging.INFO), describe(record))
        elif self.echo is not None:
            self.echo.write("[mixle_mpi] " + logs.clean(describe(record)) + "\n")
            self.echo.flush()
        return record

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _value(key: str, value: Any) -> str:
    """A field as a person reads it: times of day instead of epoch floats."""
    if key.endswith("_at") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return logs.clock(value, ms=True)
    return str(value)


def _blas_text(blas: Any) -> str:
    """``openblas 0.3.30 (1 thread)`` per BLAS library loaded, from the start event."""
    if not isinstance(blas, list) or not blas:
        return "none found"
    parts = []
    for lib in blas:
        n = lib.get("num_threads")
        parts.append(
            f"{lib.get('internal_api', '?')} {lib.get('version') or ''}".strip()
            + (f" ({n} thread{'s' if n != 1 else ''})" if n is not None else "")
        )
    return ", ".join(parts)


def _start_text(rec: dict[str, Any]) -> str:
    """The start event in one line: the layout, then MPI and BLAS, then the detection settings."""
    s = rec.get("settings") or {}
    layout = [
        f"{rec['workers']} workers" + (f" + {rec['spares']} spare(s)" if rec.get("spares") else "")
    ]
    if "num_shards" in rec:
        layout.append(
            f"{rec['num_shards']} shards"
            + (f" x {rec['sub_chunks']} sub-chunks" if rec.get("sub_chunks", 1) != 1 else "")
        )
    if "max_retries" in rec:
        layout.append(f"max_retries {rec['max_retries']}")
    parts = [", ".join(layout)]
    if "mpi" in rec:
        parts.append(
            f"MPI: {rec['mpi']}" + (f" (shrink: {rec['shrink']})" if rec.get("shrink") else "")
        )
    if "blas" in rec:
        parts.append(f"BLAS: {_blas_text(rec['blas'])}")
    if "heartbeat_period" in s and "heartbeat_timeout" in s:
        parts.append(
            f"heartbeat every {s['heartbeat_period']:g} s, timeout {s['heartbeat_timeout']:g} s"
        )
    if rec.get("fault_plan"):
        parts.append(f"fault plan: {len(rec['fault_plan'])} planned fault(s)")
    return "start: " + "; ".join(parts)


def _resumed_text(rec: dict[str, Any]) -> str:
    """Where a fit resumed from; a fallback to ``.prev`` says so, and why."""
    text = f"resumed {rec.get('path')} after iteration {rec.get('iteration')}"
    if rec.get("finished"):
        text += " (the fit had finished: nothing left to compute)"
    if rec.get("fallback"):
        text += f"; read {rec.get('source')} instead, because {rec['fallback']}"
    return text


def _continuation_text(rec: dict[str, Any]) -> str:
    """How the job goes on after a failure, and why (chosen once at the start)."""
    text = f"after a failure: continue by {rec.get('method')} ({rec.get('reason')}); respawn {rec.get('respawn')}"
    if rec.get("pmix"):
        text += f"; {rec['pmix']}"
    if rec.get("failover", "off") != "off":
        text += f"; driver failover {rec['failover']}"
    return text


def _driver_failed_text(rec: dict[str, Any]) -> str:
    return (
        f"the driver (pid {rec.get('pid')} on {rec.get('host', '?')}) died: rank {rec.get('seen_by')} saw it "
        f"({rec.get('cause')})"
    )


TOOK_OVER = (
    "drives now, over"  # in the line of a driver_elected event: a survivor took over (failover)
)


def _driver_elected_text(rec: dict[str, Any]) -> str:
    return (
        f"rank {rec.get('rank')} (pid {rec.get('pid')} on {rec.get('host', '?')}) {TOOK_OVER} "
        f"{rec.get('survivors')} surviving rank(s), agreed in {rec.get('agreed_seconds')} s"
    )


def _driver_resumed_text(rec: dict[str, Any]) -> str:
    return (
        f"rank {rec.get('rank')} (pid {rec.get('pid')} on {rec.get('host', '?')}) resumed the fit after "
        f"iteration {rec.get('iteration')} with {rec.get('ranks')} rank(s), {rec.get('since_death')} s after "
        "the driver died"
    )


def _driver_shards_text(rec: dict[str, Any]) -> str:
    shards, mib = rec["shards"], rec.get("share_bytes", 0) / 2**20
    if shards:
        ids = f"shard {shards[0]}" if len(shards) == 1 else f"shards {shards[0]}-{shards[-1]}"
        return (
            f"the driver computes {ids} itself ({len(shards)} of {rec.get('num_shards', '?')}, "
            f"{mib:.2f} MiB stored; setting driver_computes)"
        )
    if not rec.get("setting", True):
        return "the driver computes no shard (setting driver_computes off)"
    if not rec.get("share"):
        return "the driver computes no shard: S // (workers + 1) is 0 (more shards would give it a share)"
    return (
        f"the driver computes no shard: its share, {rec['share']} shard(s), is {mib:.1f} MiB stored, over "
        f"driver_share_max_bytes ({rec.get('max_bytes', 0) / 2**20:.1f} MiB); it holds no data, "
        "so its memory stays flat"
    )


def _ranks_text(rec: dict[str, Any]) -> str:
    """Where each rank runs: rank -> host:pid, the driver first."""
    places = rec.get("ranks") or {}
    return "ranks: " + ", ".join(
        f"{r}{' (driver)' if r == '0' else ''} {where}" for r, where in places.items()
    )


def _failover_armed_text(rec: dict[str, Any]) -> str:
    """Which ranks may take over should the driver die (a checkpoint exists to resume from)."""
    ranks = ", ".join(str(w) for w in rec.get("workers") or []) or "none"
    out = rec.get("out") or []
    return f"driver failover armed: rank(s) {ranks} may take over" + (
        f" (not rank(s) {', '.join(map(str, out))}: they cannot read the store or the checkpoint's folder, "
        "see failover_unavailable)"
        if out
        else ""
    )


def relaunched_text(rec: dict[str, Any]) -> str:
    """A launch that lost a host, launched again without it."""
    return (
        f"relaunched without lost host(s) {', '.join(rec.get('lost_hosts') or [])} (attempt {rec.get('attempt')}, "
        f"{rec.get('ranks')} ranks, was {rec.get('was_ranks')}; left out: {', '.join(rec.get('left_out') or [])})"
    )


SPECIAL = {
    "start": ("workers", _start_text),
    "relaunched": ("lost_hosts", relaunched_text),
    "ranks": ("ranks", _ranks_text),
    "failover_armed": ("workers", _failover_armed_text),
    "driver_shards": ("shards", _driver_shards_text),
    "resumed": ("iteration", _resumed_text),
    "continuation": ("method", _continuation_text),
    "driver_failed": ("cause", _driver_failed_text),
    "driver_elected": ("survivors", _driver_elected_text),
    "driver_resumed": ("since_death", _driver_resumed_text),
}


def describe(rec: dict[str, Any]) -> str:
    """One readable line for an event record."""
    ev = rec.get("event", "?")
    special = SPECIAL.get(ev)
    if special is not None and special[0] in rec:
        return special[1](rec)
    who = ""
    if "worker" in rec:
        who = f"rank {rec['worker']}"
        if rec.get("pid") is not None:
            who += f" (pid {rec['pid']} on {rec.get('host', '?')})"
    extra = " ".join(f"{k}={_value(k, v)}" for k, v in rec.items() if k not in SKIP)
    return " ".join(p for p in (ev, who, extra) if p)


def _ends_torn(path: str) -> bool:
    """The file at ``path`` ends inside a line (a writer was killed mid-record)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False  # none yet (or a link, which the append refuses)
    try:
        size = os.fstat(fd).st_size
        return size > 0 and os.pread(fd, 1, size - 1) != b"\n"
    finally:
        os.close(fd)


class Events(list):
    """The events of a log, oldest first, and how many torn lines were skipped (``skipped``)."""

    skipped = 0


def read_events(path: str, last_bytes: int | None = None) -> Events:
    """Every event in the log (only those in its last ``last_bytes``, when given): the one
    reader of an event log. A line that does not parse is skipped and counted: a driver
    killed mid-write leaves a torn line, and its rerun appends after it. A last line without
    its newline is a record a live job is still appending (and the first line of a window
    was cut by the window): skipped without counting. A missing log has no events."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - last_bytes) if last_bytes else 0)
            lines = fh.read().split(b"\n")
    except FileNotFoundError:
        return Events()
    cut_first = bool(last_bytes) and size > last_bytes
    events = Events()
    for i, line in enumerate(lines):
        record = _record(line)
        if record is not None:
            events.append(record)
        elif line.strip() and i != len(lines) - 1 and not (cut_first and i == 0):
            events.skipped += 1
    return events


def _record(line: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(line.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError is one
        return None
    return record if isinstance(record, dict) else None


def skipped_text(events: Events) -> str:
    """The line a reader shows when it skipped torn lines ("" when it skipped none)."""
    n = events.skipped
    return (
        f"skipped {n} torn line{'s' if n != 1 else ''} (a write cut short by a kill)" if n else ""
    )
