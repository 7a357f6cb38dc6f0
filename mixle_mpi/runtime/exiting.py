"""How every rank ends: never hang in MPI_Finalize, never outlive a failure.

After a rank death MPI_Finalize can hang (always on MPICH, sometimes on Open MPI), so the
driver and original workers flush and ``os._exit``. An uncaught exception on the driver
stops the workers and exits nonzero; on any other rank it aborts the whole job. The driver
also writes a small JSON status file (``MIXLE_MPI_STATUS_FILE``) that the launcher trusts
over mpiexec's own exit code, and, once it can act on SIGTERM/SIGUSR1/SIGINT, its pid
(``MIXLE_MPI_DRIVER_PID_FILE``), so the launcher forwards those signals to it alone.

An error is said once: the rank that meets it logs one line (a traceback too, for what is
not one of our own errors), and the status file says so (``reported``), so the launcher
does not repeat it.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import traceback

from mixle_mpi.core import exitcodes, logs
from mixle_mpi.core.errors import (
    ConfigError,
    DataError,
    Interrupted,
    Preempted,
    PreemptedUnsaved,
    ReconfigurationTimeout,
)
from mixle_mpi.launch import contract

_state: dict = {"role": None, "handle": None, "status_written": False}


def write_status(
    code: int, message: str = "", extra: dict | None = None, reported: bool = False
) -> None:
    """The driver's verdict for the launcher; ``reported``: ``message`` is on stderr already.
    "Never started" does not replace a rank's early verdict (``_early_verdict``): where a
    worker's own error ends it without MPI_Abort (srun's PMIx), the driver then only meets
    its startup deadline, and the worker's error is the cause."""
    if not contract.status_wanted() or _state["status_written"]:
        return
    if code == exitcodes.NEVER_STARTED and (contract.written_status() or {}).get("by"):
        return
    _state["status_written"] = True
    contract.write_status(
        {
            "exit_code": int(code),
            "status": "ok" if code == 0 else "error",
            "message": message,
            "reported": bool(reported),
            **(extra or {}),
        }
    )


def _early_verdict(code: int, who: str, message: str) -> None:
    """A rank's own failure before the handle exists (the user's code, say) ends the job
    before the driver can say why: leave the verdict for the launcher, unless the driver's
    is there, so that it ends the job with ``code`` rather than take it for a failed start
    and launch it again to fail the same way."""
    if contract.written_status() is not None:
        return
    try:
        write_status(code, f"{who} failed: {message}", extra={"by": who}, reported=True)
    except OSError:
        pass


def write_driver_pid() -> None:
    """Tell the launcher where to forward SIGTERM/SIGUSR1: call once the driver's handlers
    are installed, so a forwarded signal is never taken by a default action."""
    contract.write_driver()


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def exit_code_for(exc: BaseException) -> int:
    from mixle_mpi.runtime.startup import NumericsDiffer, StartupFailed
    from mixle_mpi.storage.checkpoint import CheckpointError, CheckpointTimeout

    if isinstance(exc, (Interrupted, KeyboardInterrupt)):
        return exitcodes.INTERRUPTED
    if isinstance(exc, PreemptedUnsaved):
        return exitcodes.PREEMPTED_UNSAVED
    if isinstance(exc, Preempted):
        return exitcodes.CHECKPOINTED
    if isinstance(exc, StartupFailed):
        return exitcodes.NEVER_STARTED
    if isinstance(exc, NumericsDiffer):
        return exitcodes.NUMERICS_DIFFER
    if isinstance(exc, ReconfigurationTimeout):  # the checkpoint is intact: a rerun resumes
        return exitcodes.RERUN_TO_RESUME
    if isinstance(exc, CheckpointTimeout):  # the file system, not the input: a rerun resumes
        return exitcodes.CHECKPOINT_TIMEOUT
    if isinstance(exc, (ConfigError, DataError, CheckpointError)):
        return exitcodes.BAD_INPUT
    return exitcodes.FAILED


def failure_line(exc: BaseException, who: str = "") -> tuple[int, str]:
    """The one line that says why a rank ends, and its log level (pure). A stop that was
    asked for (preemption, Ctrl-C) is not a failure: its message says what was saved and
    what to do. One of our own errors is its message; anything else was shown with its
    traceback just above, so the line does not repeat it."""
    from mixle_mpi.core.errors import MixleMPIError

    if isinstance(exc, Preempted):
        return logging.WARNING, str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return (
            logging.WARNING,
            f"{who or 'this rank'} was interrupted (Ctrl-C) before the fit started; nothing was saved",
        )
    head = f"{who} failed: " if who else ""
    if isinstance(exc, MixleMPIError):
        return logging.ERROR, f"{head}{type(exc).__name__}: {exc}"
    return logging.ERROR, f"{head or 'failed: '}{type(exc).__name__} (traceback above)"


def _report(tp, value, tb, who: str = "") -> None:
    """One line for a rank that ends on ``value``, after its traceback if it is not one of
    our own errors (or a stop that was asked for)."""
    from mixle_mpi.core.errors import MixleMPIError

    if not isinstance(value, (MixleMPIError, KeyboardInterrupt)):
        traceback.print_exception(tp, value, tb)
    level, line = failure_line(value, who)
    logs.get().log(level, line)


def _driver_excepthook(tp, value, tb) -> None:
    _report(tp, value, tb)
    code = exit_code_for(value)
    try:
        write_status(code, f"{tp.__name__}: {value}", reported=True)
    except OSError:
        pass
    handle = _state["handle"]
    if handle is not None and not getattr(
        value, "mpi_held", False
    ):  # held: the call would only wait
        _bounded(lambda: handle.abort_workers(code, f"{tp.__name__}: {value}"))
    _flush()
    os._exit(code)


ABORT_DEADLINE = 10.0  # telling the workers is best effort: past this the driver just exits


def _bounded(fn) -> None:
    """Run ``fn`` (telling workers to end) but never wait past ABORT_DEADLINE: after an
    abandoned collective, any MPI call may wait for good. Workers end on their own deadlines."""
    from mixle_mpi.core.deadlines import run_with_deadline

    try:
        run_with_deadline(fn, ABORT_DEADLINE, "telling the workers to end")
    except Exception:  # noqa: BLE001 - we are already failing
        pass


def _driver_atexit() -> None:
    handle = _state["handle"]
    code, message = exitcodes.OK, "finished"
    if handle is not None and not handle.closed_cleanly:
        try:
            handle.close()
        except Exception as exc:  # noqa: BLE001 - reported through the status and exit code
            code, message = (
                exitcodes.FAILED,
                f"closing the handle at exit failed: {type(exc).__name__}: {exc}",
            )
    write_status(code, message)
    _flush()
    if handle is not None:
        try:
            handle._finish()
        except Exception as exc:  # noqa: BLE001 - the fit is saved; only the teardown failed
            logs.get().warning(f"teardown after the fit failed: {exc}")
    _flush()
    os._exit(code)


def _rank_excepthook(tp, value, tb) -> None:
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    driver = rank == 0 and MPI.Comm.Get_parent() == MPI.COMM_NULL
    # The driver's own mistake needs no rank, host or pid; another rank's does.
    _report(
        tp,
        value,
        tb,
        "" if driver else f"rank {rank} ({MPI.Get_processor_name()}, pid {os.getpid()})",
    )
    code = exit_code_for(value)
    if driver:
        # The driver failed before the job started: the workers wait for it point to point,
        # so tell them to end (no MPI_Abort: Open MPI's banner is not for a user's typo).
        from mixle_mpi.runtime.startup import abort_startup

        try:
            write_status(code, f"{tp.__name__}: {value}", reported=True)
        except OSError:
            pass
        _bounded(lambda: abort_startup(MPI.COMM_WORLD, code, f"{tp.__name__}: {value}"))
        _flush()
        os._exit(code)
    if _state["role"] == "early":
        _early_verdict(code, f"rank {rank}", f"{tp.__name__}: {value}")
    _flush()
    from mixle_mpi.runtime.startup import pmix_detached

    if (
        pmix_detached()
    ):  # srun --mpi=pmix: MPI_Abort needs PMIx; the driver survives this rank's exit
        os._exit(code)
    MPI.COMM_WORLD.Abort(code)


def install_early() -> None:
    """Before the handle exists: an uncaught exception on any rank aborts the whole job
    (plain ``python`` would leave the other ranks waiting forever)."""
    logs.setup()
    if _state["role"] is None:
        _state["role"] = "early"
        sys.excepthook = _rank_excepthook


def install(role: str, handle=None) -> None:
    """Install the ending rules for this process's role ('driver' or 'worker')."""
    logs.setup()
    if handle is not None:
        _state["handle"] = handle
    if _state["role"] == role:
        return
    _state["role"] = role
    if role == "driver":
        sys.excepthook = _driver_excepthook
        atexit.register(_driver_atexit)
    else:
        sys.excepthook = _rank_excepthook
