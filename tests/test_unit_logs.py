"""Log lines: levels from -q/-v or MIXLE_MPI_LOG_LEVEL, one line per warning, one line per ending."""

from __future__ import annotations

import io
import logging
import signal
import warnings

import pytest

from mixle_mpi.core import exitcodes, logs
from mixle_mpi.core.errors import NoWorkersLeft
from mixle_mpi.fitting.fitloop import Interrupted, Preempted, stopped
from mixle_mpi.launch import contract
from mixle_mpi.runtime import exiting
from mixle_mpi.storage.checkpoint import CheckpointError


@pytest.mark.parametrize(
    "quiet, verbose, env, level",
    [
        (False, False, {}, logging.INFO),
        (True, False, {}, logging.WARNING),
        (False, True, {}, logging.DEBUG),
        (True, True, {}, logging.DEBUG),  # -v wins
        (False, False, {logs.LEVEL_ENV: "debug"}, logging.DEBUG),
        (False, False, {logs.LEVEL_ENV: " Warning "}, logging.WARNING),
        (True, False, {logs.LEVEL_ENV: "debug"}, logging.WARNING),  # a flag beats the environment
    ],
)
def test_level_from_flags_then_environment(quiet, verbose, env, level):
    assert logs.level_from(quiet, verbose, env) == (level, None)
    assert logs.LEVELS[logs.level_name(level)] == level  # what the launcher passes to the ranks


def test_a_bad_level_in_the_environment_is_quoted_and_info_is_used():
    level, problem = logs.level_from(environ={logs.LEVEL_ENV: "loud"})
    assert (
        level == logging.INFO and "MIXLE_MPI_LOG_LEVEL='loud'" in problem and "'debug'" in problem
    )


def _record(level: int, msg: str) -> logging.LogRecord:
    return logging.LogRecord("mixle_mpi.x", level, __file__, 1, msg, None, None)


def test_line_format_has_a_clock_time_and_says_warning_or_error():
    fmt = logs.LineFormatter()
    info = fmt.format(_record(logging.INFO, "resumed ck.h5 after iteration 3"))
    assert info.startswith("[mixle_mpi] ") and info.endswith(" resumed ck.h5 after iteration 3")
    clock = info.split()[1]
    assert len(clock) == 8 and clock.count(":") == 2
    assert " warning: x" in fmt.format(_record(logging.WARNING, "x"))
    assert " error: x" in fmt.format(_record(logging.ERROR, "x"))
    assert "\x00" not in fmt.format(
        _record(logging.ERROR, "lost the driver (Process Failure\x00\x00)")
    )


@pytest.fixture
def fresh_logging():
    """mixle_mpi's logger as in a new process (no handler yet), restored afterwards with
    warnings.showwarning and the warning filters."""
    root = logs.get()
    before = (root.level, list(root.handlers), root.propagate)
    root.handlers[:] = []
    with warnings.catch_warnings():
        yield root
    root.setLevel(before[0])
    root.handlers[:] = before[1]
    root.propagate = before[2]


def test_setup_keeps_a_level_chosen_by_a_flag(fresh_logging, monkeypatch):
    monkeypatch.setenv(logs.LEVEL_ENV, "error")
    logs.setup(logging.DEBUG)  # -v in the command line
    logs.setup()  # later, from the handle: the flag's level stays
    assert fresh_logging.level == logging.DEBUG
    assert sum(getattr(h, "_mixle_mpi", False) for h in fresh_logging.handlers) == 1


def test_a_warning_is_one_line_without_its_source_line(fresh_logging, capsys):
    logs.setup(logging.INFO)
    warnings.simplefilter("always")
    warnings.warn(
        "this mixture fit left 2 of 3 component(s)\nwith less data", UserWarning, stacklevel=1
    )
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert (
        "warning: UserWarning: this mixture fit left 2 of 3 component(s) with less data" in lines[0]
    )
    assert "warnings.warn(" not in err and ".py:" not in err


def test_one_line_per_ending_and_the_right_exit_code():
    level, line = exiting.failure_line(stopped(signal.SIGTERM, 12, "ck.h5"))
    assert level == logging.WARNING and "driver failed" not in line
    assert (
        line
        == "preempted: received SIGTERM after iteration 12; checkpoint written to ck.h5, ready for a "
        "requeue: rerun the same command to resume"
    )
    ctrl_c = stopped(signal.SIGINT, 4, None)
    assert (
        isinstance(ctrl_c, Interrupted)
        and exiting.exit_code_for(ctrl_c) == exitcodes.INTERRUPTED == 130
    )
    assert exiting.failure_line(ctrl_c)[1].startswith(
        "interrupted (Ctrl-C, SIGINT) after iteration 4; no checkpoint"
    )
    assert exiting.exit_code_for(stopped(signal.SIGUSR1, 1, "c.h5")) == exitcodes.CHECKPOINTED
    assert isinstance(stopped(signal.SIGUSR1, 1, "c.h5"), Preempted)
    unsaved = stopped(signal.SIGTERM, 3, None)  # no checkpoint: never claims one (issue 33)
    assert exiting.exit_code_for(unsaved) == exitcodes.PREEMPTED_UNSAVED == 76
    assert (
        "nothing was saved" in str(unsaved)
        and "checkpoint written" not in str(unsaved)
        and "starts over" in str(unsaved)
    )
    assert exiting.exit_code_for(KeyboardInterrupt()) == 130
    assert exiting.failure_line(NoWorkersLeft("every worker rank is dead")) == (
        logging.ERROR,
        "NoWorkersLeft: every worker rank is dead",
    )
    assert (
        exiting.failure_line(CheckpointError("bad"), "rank 3 (h, pid 9)")[1]
        == "rank 3 (h, pid 9) failed: CheckpointError: bad"
    )
    # anything else was shown with its traceback: the line does not repeat the message
    assert exiting.failure_line(RuntimeError("user code failed")) == (
        logging.ERROR,
        "failed: RuntimeError (traceback above)",
    )


def test_status_says_whether_the_driver_printed_its_message(tmp_path, monkeypatch):
    path = tmp_path / "status.json"
    monkeypatch.setenv(contract.STATUS_ENV, str(path))
    monkeypatch.setitem(exiting._state, "status_written", False)
    exiting.write_status(2, "DataError: x", reported=True)
    import json

    assert json.loads(path.read_text()) == {
        "exit_code": 2,
        "status": "error",
        "message": "DataError: x",
        "reported": True,
    }


def test_a_workers_early_verdict_is_kept_over_never_started_but_not_over_the_drivers_own(
    tmp_path, monkeypatch
):
    """A worker's own error before the handle exists leaves its verdict; the driver, which then
    only meets its startup deadline, does not write "never started" over it. Its own error
    does replace it (the driver's verdict is trusted), and a second early verdict adds nothing."""
    import json

    from mixle_mpi.core import exitcodes

    path = tmp_path / "status.json"
    monkeypatch.setenv(contract.STATUS_ENV, str(path))
    monkeypatch.setitem(exiting._state, "status_written", False)
    exiting._early_verdict(1, "rank 3", "RuntimeError: typo")
    monkeypatch.setitem(exiting._state, "status_written", False)
    exiting._early_verdict(1, "rank 2", "RuntimeError: typo")
    first = json.loads(path.read_text())
    assert first["by"] == "rank 3" and first["exit_code"] == 1 and first["reported"], first
    monkeypatch.setitem(exiting._state, "status_written", False)
    exiting.write_status(exitcodes.NEVER_STARTED, "StartupFailed: a worker never said hello")
    assert json.loads(path.read_text()) == first
    monkeypatch.setitem(exiting._state, "status_written", False)
    exiting.write_status(2, "DataError: x", reported=True)
    assert json.loads(path.read_text())["exit_code"] == 2


@pytest.mark.parametrize("held", [False, True])
def test_a_failing_driver_tells_the_workers_unless_its_mpi_is_held(held, tmp_path, monkeypatch):
    """An abandoned Spawn under MPICH holds the driver's MPI: telling the workers would only
    wait out ABORT_DEADLINE (10 s), so the driver exits at once and they see its process gone."""
    from mixle_mpi.core.errors import ReconfigurationTimeout

    told, ended = [], []

    class Handle:
        def abort_workers(self, code, why):
            told.append(code)

    monkeypatch.setenv(contract.STATUS_ENV, str(tmp_path / "status.json"))
    monkeypatch.setitem(exiting._state, "status_written", False)
    monkeypatch.setitem(exiting._state, "handle", Handle())
    monkeypatch.setattr(exiting.os, "_exit", ended.append)
    error = ReconfigurationTimeout("spawn given up", mpi_held=held)
    exiting._driver_excepthook(type(error), error, None)
    assert ended == [exitcodes.RERUN_TO_RESUME] and told == (
        [] if held else [exitcodes.RERUN_TO_RESUME]
    )


def test_event_echo_to_a_stream_keeps_its_prefix():
    from mixle_mpi.storage.events import EventLog

    echo = io.StringIO()
    EventLog(None, echo=echo).emit("shrink", method="ulfm", epoch=1)
    assert echo.getvalue() == "[mixle_mpi] shrink method=ulfm epoch=1\n"
