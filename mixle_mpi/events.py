"""Structured event log (JSON lines) plus one human line on stderr per event.

Every detection, shrink, recovery, respawn and blacklisting is written with the worker's
rank, host and pid, the wall time and the cause, so an operator can tell what happened to
which rank after the fact (``mixle-mpi inspect`` and plain ``jq`` both read it).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import IO, Any


class EventLog:
    """Append-only JSON-lines writer; flushed per event so a killed job keeps its history."""

    def __init__(self, path: str | None, echo: IO[str] | None = sys.stderr) -> None:
        self.path = path
        self.echo = echo
        self._fh = None
        self.events: list[dict[str, Any]] = []
        if path:
            parent = os.path.dirname(os.path.abspath(path))
            os.makedirs(parent, exist_ok=True)
            self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the log

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        record = {"time": round(time.time(), 6), "event": event, **fields}
        record.setdefault("driver_host", socket.gethostname())
        self.events.append(record)
        if self._fh is not None:
            self._fh.write(json.dumps(record, default=str) + "\n")
            self._fh.flush()
        if self.echo is not None:
            self.echo.write("[mixle_mpi] " + describe(record) + "\n")
            self.echo.flush()
        return record

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def describe(rec: dict[str, Any]) -> str:
    """One readable line for an event record."""
    ev = rec.get("event", "?")
    who = ""
    if "worker" in rec:
        who = f"rank {rec['worker']}"
        if rec.get("pid") is not None:
            who += f" (pid {rec['pid']} on {rec.get('host', '?')})"
    detail = {k: v for k, v in rec.items() if k not in {"time", "event", "worker", "pid", "host", "driver_host"}}
    extra = " ".join(f"{k}={v}" for k, v in detail.items())
    return " ".join(p for p in (ev, who, extra) if p)


def read_events(path: str) -> list[dict[str, Any]]:
    """Every event in the log. A last line without its newline is a record still being
    appended by a live job; it is skipped when it does not parse yet."""
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    tail = lines.pop()
    events = [json.loads(line) for line in lines if line.strip()]
    try:
        events += [json.loads(tail)] if tail.strip() else []
    except ValueError:
        pass
    return events
