"""EventLog: JSON lines on disk (read back by read_events) and one human line per event."""

from __future__ import annotations

import io
import json
import socket

from mixle_mpi.events import EventLog, describe, read_events


def test_emit_writes_json_lines_and_echo(tmp_path):
    path = tmp_path / "sub" / "dir" / "events.jsonl"  # parent directories are created
    echo = io.StringIO()
    log = EventLog(str(path), echo=echo)
    a = log.emit("start", workers=3, num_shards=6)
    b = log.emit("worker_failed", worker=2, pid=4321, host="node-a", cause="heartbeat timeout", round=5)
    log.close()

    records = read_events(str(path))
    assert records == [a, b] == log.events
    assert records[0]["event"] == "start" and records[0]["workers"] == 3
    assert records[1]["worker"] == 2 and records[1]["pid"] == 4321 and records[1]["host"] == "node-a"
    for r in records:
        assert isinstance(r["time"], float)
        assert r["driver_host"] == socket.gethostname()

    lines = echo.getvalue().splitlines()
    assert len(lines) == 2
    assert all(line.startswith("[mixle_mpi] ") for line in lines)
    assert "start" in lines[0] and "workers=3" in lines[0]
    assert "worker_failed" in lines[1]
    assert "rank 2" in lines[1] and "pid 4321" in lines[1] and "node-a" in lines[1]
    assert "cause=heartbeat timeout" in lines[1]
    assert "driver_host" not in lines[1] and "time=" not in lines[1]

    with open(path, encoding="utf-8") as fh:
        raw = fh.read().splitlines()
    assert len(raw) == 2 and all(json.loads(line) for line in raw)


def test_flushed_per_event(tmp_path):
    path = tmp_path / "events.jsonl"
    log = EventLog(str(path), echo=None)
    log.emit("detect", worker=3)
    assert read_events(str(path))[0]["event"] == "detect"  # readable before close
    log.close()


def test_appends_across_logs(tmp_path):
    path = str(tmp_path / "events.jsonl")
    first = EventLog(path, echo=None)
    first.emit("one")
    first.close()
    second = EventLog(path, echo=None)
    second.emit("two")
    second.close()
    assert [r["event"] for r in read_events(path)] == ["one", "two"]


def test_no_path_keeps_events_in_memory_only():
    echo = io.StringIO()
    log = EventLog(None, echo=echo)
    rec = log.emit("respawn", worker=4, pid=99, host="h", incarnation=1)
    assert log.events == [rec]
    assert "rank 4 (pid 99 on h)" in echo.getvalue()
    log.close()


def test_close_is_idempotent(tmp_path):
    log = EventLog(str(tmp_path / "e.jsonl"), echo=None)
    log.close()
    log.close()


def test_non_json_fields_are_stringified(tmp_path):
    path = str(tmp_path / "e.jsonl")
    log = EventLog(path, echo=None)
    log.emit("round", reused={1, 2}, obj=object)
    log.close()
    (rec,) = read_events(path)
    assert isinstance(rec["reused"], str) and isinstance(rec["obj"], str)


def test_explicit_driver_host_is_kept():
    log = EventLog(None, echo=None)
    rec = log.emit("x", driver_host="elsewhere")
    assert rec["driver_host"] == "elsewhere"


def test_read_events_skips_blank_lines(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text('{"event": "a"}\n\n   \n{"event": "b"}\n', encoding="utf-8")
    assert [r["event"] for r in read_events(str(path))] == ["a", "b"]


def test_describe_forms():
    assert describe({"event": "start", "time": 1.0, "driver_host": "d"}) == "start"
    assert describe({"event": "detect", "worker": 2}) == "detect rank 2"
    assert describe({"event": "detect", "worker": 2, "pid": None, "host": "h"}) == "detect rank 2"
    assert describe({"event": "detect", "worker": 2, "pid": 7}) == "detect rank 2 (pid 7 on ?)"
    assert describe({"event": "detect", "worker": 2, "pid": 7, "host": "h", "cause": "x", "round": 3}) == (
        "detect rank 2 (pid 7 on h) cause=x round=3"
    )
    assert describe({}) == "?"
