"""EventLog: JSON lines on disk (read back by read_events) and one human line per event."""

from __future__ import annotations

import io
import json
import logging
import socket
import time

import pytest

from mixle_mpi.core import logs
from mixle_mpi.storage.events import EventLog, describe, read_events


def test_emit_writes_json_lines_and_echo(tmp_path):
    path = tmp_path / "sub" / "dir" / "events.jsonl"  # parent directories are created
    echo = io.StringIO()
    log = EventLog(str(path), echo=echo)
    a = log.emit("start", workers=3, num_shards=6)
    b = log.emit(
        "worker_failed", worker=2, pid=4321, host="node-a", cause="heartbeat timeout", round=5
    )
    log.close()

    records = read_events(str(path))
    assert records == [a, b] == log.events
    assert records[0]["event"] == "start" and records[0]["workers"] == 3
    assert (
        records[1]["worker"] == 2 and records[1]["pid"] == 4321 and records[1]["host"] == "node-a"
    )
    for r in records:
        assert isinstance(r["time"], float)
        assert r["driver_host"] == socket.gethostname()

    lines = echo.getvalue().splitlines()
    assert len(lines) == 2
    assert all(line.startswith("[mixle_mpi] ") for line in lines)
    assert lines[0] == "[mixle_mpi] start: 3 workers, 6 shards"
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
    assert describe(
        {"event": "detect", "worker": 2, "pid": 7, "host": "h", "cause": "x", "round": 3}
    ) == ("detect rank 2 (pid 7 on h) cause=x round=3")
    assert describe({}) == "?"


START = {
    "event": "start",
    "time": 1.0,
    "driver_pid": 7,
    "workers": 3,
    "num_shards": 6,
    "sub_chunks": 1,
    "max_retries": 2,
    "shrink": "ulfm",
    "shrink_reason": "Open MPI 5.0.11 with ULFM: Comm.Shrink works",
    "mpi": "Open MPI 5.0.11",
    "blas": [
        {
            "internal_api": "openblas",
            "version": "0.3.30",
            "num_threads": 1,
            "threading_layer": "pthreads",
            "architecture": "SkylakeX",
        },
        {
            "internal_api": "openblas",
            "version": "0.3.31",
            "num_threads": 2,
            "threading_layer": "pthreads",
            "architecture": "SkylakeX",
        },
    ],
    "settings": {
        "heartbeat_period": 0.4,
        "heartbeat_timeout": 1.0,
        "driver_timeout": 60.0,
        "reconfigure_timeout": 60.0,
        "blas_threads": 1,
        "respawn": True,
    },
    "fault_plan": [],
}


def test_start_line_names_mpi_and_blas_in_one_readable_line():
    line = describe(START)
    assert line == (
        "start: 3 workers, 6 shards, max_retries 2; MPI: Open MPI 5.0.11 (shrink: ulfm); "
        "BLAS: openblas 0.3.30 (1 thread), openblas 0.3.31 (2 threads); heartbeat every 0.4 s, timeout 1 s"
    )
    assert not any(c in line for c in "{}[]'")  # no dicts of dicts


def test_times_in_a_line_are_clock_times_not_epoch_floats():
    t = 1796093100.782367
    line = describe(
        {"event": "failure_detected", "worker": 2, "pid": 5, "host": "h", "detected_at": t}
    )
    assert f"detected_at={logs.clock(t, ms=True)}" in line and "1796093100" not in line
    assert logs.clock(t, ms=True) == time.strftime("%H:%M:%S", time.localtime(t)) + ".782"


def test_resumed_line_says_it_fell_back_to_prev():
    plain = describe({"event": "resumed", "path": "ck.h5", "iteration": 5, "finished": False})
    assert plain == "resumed ck.h5 after iteration 5"
    fell = describe(
        {
            "event": "resumed",
            "path": "ck.h5",
            "iteration": 4,
            "finished": False,
            "source": "ck.h5.prev",
            "fallback": "ck.h5 is damaged (checksum mismatch)",
        }
    )
    assert (
        fell
        == "resumed ck.h5 after iteration 4; read ck.h5.prev instead, because ck.h5 is damaged (checksum mismatch)"
    )


@pytest.fixture
def captured():
    """mixle_mpi's log lines at INFO, as the stderr handler formats them."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.LineFormatter())
    root = logs.get()
    old_level, old_propagate = root.level, root.propagate
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    root.propagate = False
    yield stream
    root.removeHandler(handler)
    root.setLevel(old_level)
    root.propagate = old_propagate


def test_events_are_logged_at_their_level_checkpoints_only_with_verbose(captured):
    log = EventLog(None)  # the default echo: the logging module
    log.emit("checkpoint", path="ck.h5", iteration=1, finished=False, seconds=0.003)
    log.emit("failure_detected", worker=2, pid=9, host="h", cause="heartbeat")
    log.emit("recovery", worker=1, kind="estep", call=3, shards=[1])
    lines = captured.getvalue().splitlines()
    assert len(lines) == 2, lines  # the checkpoint is folded into the progress line
    assert "warning: failure_detected rank 2 (pid 9 on h) cause=heartbeat" in lines[0]
    assert "recovery rank 1" in lines[1] and "warning" not in lines[1]
    assert all(line[12:20].count(":") == 2 for line in lines)  # "[mixle_mpi] 12:03:07 ..."


def test_no_nul_or_control_bytes_reach_stderr(captured):
    """An MPI error string is a C buffer and may carry NULs; a NUL makes grep call a log binary."""
    cause = "ulfm: MPI error class 75: MPI_ERR_PROC_FAILED\x00\x00\x1b[K"
    EventLog(None).emit("failure_detected", worker=2, cause=cause)
    echo = io.StringIO()
    EventLog(None, echo=echo).emit("failure_detected", worker=2, cause=cause)
    for text in (captured.getvalue(), echo.getvalue()):
        assert "\x00" not in text and "\x1b" not in text
        assert "MPI_ERR_PROC_FAILED\\x1b[K" in text  # other control bytes are shown, not lost
    assert logs.clean("a\tb\nc") == "a\tb\nc"


def test_the_drivers_share_reads_as_which_shards_or_why_none():
    base = {"event": "driver_shards", "share": 5, "setting": True, "max_bytes": 1 << 20}
    assert describe(
        {**base, "shards": [0, 1, 2, 3, 4], "share_bytes": 1 << 19, "num_shards": 16}
    ) == (
        "the driver computes shards 0-4 itself (5 of 16, 0.50 MiB stored; setting driver_computes)"
    )
    assert describe(
        {**base, "shards": [0], "share": 1, "share_bytes": 1 << 10, "num_shards": 2}
    ) == ("the driver computes shard 0 itself (1 of 2, 0.00 MiB stored; setting driver_computes)")
    assert "over driver_share_max_bytes (1.0 MiB)" in describe(
        {**base, "shards": [], "share_bytes": 27 << 20}
    )
    assert "27.0 MiB stored" in describe({**base, "shards": [], "share_bytes": 27 << 20})
    assert describe({**base, "shards": [], "setting": False, "share": 0, "share_bytes": 0}) == (
        "the driver computes no shard (setting driver_computes off)"
    )
    assert "S // (workers + 1) is 0" in describe(
        {**base, "shards": [], "share": 0, "share_bytes": 0}
    )


def test_a_torn_line_from_a_killed_driver_is_skipped_and_said_by_every_reader(tmp_path):
    """A driver killed mid-write, then rerun: the rerun's events follow a torn line. The one
    reader keeps every whole event and says it skipped one; inspect, status and the chaos
    campaigns all read through it."""
    from mixle_mpi.cli import inspector, status

    path = tmp_path / "events.jsonl"
    first, rerun = {"time": 1.0, "event": "start"}, {"time": 2.0, "event": "resumed"}
    path.write_text(
        json.dumps(first) + "\n" + '{"time": 1.5, "event": "chec' + json.dumps(rerun) + "\n"
    )
    path.write_text(path.read_text() + json.dumps({"time": 3.0, "event": "closed"}) + "\n" + '{"ti')
    events = read_events(str(path))
    assert [e["event"] for e in events] == ["start", "closed"] and events.skipped == 1
    lines = inspector.summarize(str(path))
    assert lines[0] == "skipped 1 torn line (a write cut short by a kill)"
    assert [e["event"] for e in status.tail_events(str(path), 10)] == ["start", "closed"]
    assert read_events(str(tmp_path / "none.jsonl")) == []
    rerun = EventLog(str(path), echo=None)  # a rerun after the torn '{"ti': its events are whole
    rerun.emit("start")
    rerun.close()
    again = read_events(str(path))
    assert [e["event"] for e in again] == ["start", "closed", "start"] and again.skipped == 2
