"""The contract between ``mixle-mpi run`` (the launcher) and the ranks it starts: which
environment variable names which file, who writes it and who reads it. Both sides use this
module only, so the two ends of each file cannot drift apart.

=======================  ==================  ==========================  =========================
variable                 file                written by                  read by
=======================  ==================  ==========================  =========================
MIXLE_MPI_RUN_DIR        the run folder      launcher (mkdtemp, 0700)    every rank (core/rundir)
MIXLE_MPI_JOB_TAG        (a random text)     launcher                    reaper, job watch, chaos
MIXLE_MPI_INIT_BEGUN_    init_begun.txt      each rank, a line as its    launcher (never started?),
FILE                                         MPI init begins (its        driver (ranks gone)
                                             identity: pid, start,
                                             pid space)
MIXLE_MPI_MPI_UP_FILE    mpi_up.json         driver, MPI up              launcher
MIXLE_MPI_STARTED_FILE   started.json        driver, fit started         launcher, chaos
MIXLE_MPI_DRIVER_PID_    driver.json         driver (pid, start, space)  launcher's signal forwarder
FILE
MIXLE_MPI_STATUS_FILE    status.json         driver, its verdict         launcher (over mpiexec's)
MIXLE_MPI_STOP_FILE      stop.json           launcher, a signal for a    the driver, after each
                                             driver it cannot signal     iteration (fitloop)
                                             (another host, pid space)
MIXLE_MPI_RELAUNCHES     (JSON, no file)     launcher, after each launch driver (event "relaunched",
                                             without a lost host         summary.json)
=======================  ==================  ==========================  =========================

The user's ``MIXLE_MPI_STARTUP_TIMEOUT`` (``startup_timeout``) bounds every rank's start (MPI
initialisation, the handshake); it is read here because the launcher reads it too.

Every file lives in the run folder and is written only while that folder can be trusted
(``rundir``); a rank on a host that cannot see it goes on without it. Every reader treats a
missing or half-written file as "not yet". The run folder is in the launcher's temp folder,
but for a launch over several hosts in the folder it is launched from (hidden, removed at
the end), which every host must see anyway (mpiexec starts every rank there): hosts do not
share their temp folders, and a driver on another host than the launcher's could then
write no status, so that a fit that finished looked failed.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import tempfile
import time
from typing import NamedTuple

from mixle_mpi.core import procs, rundir
from mixle_mpi.core.errors import ConfigError
from mixle_mpi.launch import ranks

TAG_ENV = "MIXLE_MPI_JOB_TAG"
INIT_BEGUN_ENV = "MIXLE_MPI_INIT_BEGUN_FILE"
MPI_UP_ENV = "MIXLE_MPI_MPI_UP_FILE"
STARTED_ENV = "MIXLE_MPI_STARTED_FILE"
DRIVER_PID_ENV = "MIXLE_MPI_DRIVER_PID_FILE"
STATUS_ENV = "MIXLE_MPI_STATUS_FILE"
RELAUNCHES_ENV = "MIXLE_MPI_RELAUNCHES"
STOP_ENV = "MIXLE_MPI_STOP_FILE"
FILE_VARS = (INIT_BEGUN_ENV, MPI_UP_ENV, STARTED_ENV, DRIVER_PID_ENV, STATUS_ENV, STOP_ENV)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
# How long every rank gives MPI initialisation and the startup handshake; the launcher reads it
# too (a bad value is refused before any launch, and its messages name it).
STARTUP_TIMEOUT_ENV = "MIXLE_MPI_STARTUP_TIMEOUT"
DEFAULT_STARTUP_TIMEOUT = 120.0


def startup_timeout(environ=None) -> float:
    """``MIXLE_MPI_STARTUP_TIMEOUT`` in seconds (> 0), else the default."""
    environ = os.environ if environ is None else environ
    raw = environ.get(STARTUP_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_STARTUP_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{STARTUP_TIMEOUT_ENV}={raw!r} must be a number of seconds > 0")
    return value


# -- the launcher's side ------------------------------------------------------------------------
class RunFiles:
    """The files one launch shares with its ranks, in a private folder (mode 0700)."""

    def __init__(self, shared: str | None = None) -> None:
        self.dir = _private_folder(shared)
        self.status = os.path.join(self.dir, "status.json")
        self.driver = os.path.join(self.dir, "driver.json")
        self.mpi_up = os.path.join(self.dir, "mpi_up.json")
        self.started = os.path.join(self.dir, "started.json")
        self.init_begun = os.path.join(self.dir, "init_begun.txt")
        self.stop = os.path.join(self.dir, "stop.json")

    def env(self, tag: str, signals: bool = True) -> dict[str, str]:
        """The variables that hand these files to the ranks (``signals``: the driver writes
        its identity, so the launcher can forward SIGTERM/SIGUSR1/SIGINT to it)."""
        env = {
            rundir.RUN_DIR_ENV: self.dir,
            TAG_ENV: tag,
            INIT_BEGUN_ENV: self.init_begun,
            MPI_UP_ENV: self.mpi_up,
            STARTED_ENV: self.started,
            STATUS_ENV: self.status,
        }
        if signals:
            env[DRIVER_PID_ENV] = self.driver
            env[STOP_ENV] = self.stop
        return env

    def read_status(self) -> dict | None:
        return _read_json(self.status)

    def mpi_is_up(self) -> bool:
        return os.path.exists(self.mpi_up)

    def fit_started(self) -> bool:
        return os.path.exists(self.started)

    def init_begun_pids(self) -> list[int]:
        """Of this host's ranks: the launcher looks for them among its own processes."""
        return init_begun_pids(self.init_begun, socket.gethostname())

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def _private_folder(shared: str | None) -> str:
    """A new private folder: in ``shared`` (a folder every host of the launch sees) where it
    can be made there, else in this host's temp folder."""
    if shared:
        try:
            return tempfile.mkdtemp(prefix=".mixle_mpi_run_", dir=shared)
        except OSError:
            pass  # not writable there: the ranks of other hosts go on without it
    return tempfile.mkdtemp(prefix="mixle_mpi_run_")


def outer_vars_removed(env: dict) -> dict:
    """``env`` without an outer launcher's contract (a ``run`` inside a ``run``): a rank must
    never write into a folder its own launcher did not hand it (pure)."""
    return {
        k: v
        for k, v in env.items()
        if k not in (*FILE_VARS, TAG_ENV, rundir.RUN_DIR_ENV, RELAUNCHES_ENV)
    }


def relaunches_env(records: list[dict]) -> dict[str, str]:
    """The variable that tells the ranks of a launch which launches before it lost a host."""
    return {RELAUNCHES_ENV: json.dumps(records)} if records else {}


def _read_json(path: str) -> dict | None:
    text = rundir.read_trusted(path)
    try:
        record = json.loads(text) if text else None
    except ValueError:
        return None  # half written: not yet
    return record if isinstance(record, dict) else None


def request_stop(path: str, signum: int) -> bool:
    """Ask the driver to act on ``signum`` as if it had received it, through the run folder:
    for a driver no signal of this host reaches (after a failover to another host). True if
    written."""
    return rundir.write_marker(path, {"signal": int(signum), "time": time.time()})


def read_driver(path: str, host: str | None = None) -> tuple[procs.Ident | None, str | None]:
    """The driver's identity from ``driver.json``: ``(ident, None)``, or ``(None, why)`` when
    there is none to signal (``why`` None: not written yet)."""
    record = _read_json(path)
    if record is None:
        return None, None
    try:
        ident = (int(record["pid"]), str(record["start"]))
    except (KeyError, TypeError, ValueError):
        return None, None
    host = host or socket.gethostname()
    if record.get("host") != host:
        return (
            None,
            f"the driver runs on {record.get('host')}, not on this host {host}: cannot forward signals to it",
        )
    if record.get("space") and procs.pid_space() and record["space"] != procs.pid_space():
        return (
            None,
            "the driver runs in another pid space (another container) than the launcher: cannot signal it",
        )
    return ident, None


class Begun(NamedTuple):
    """One rank's record of the start of its MPI init: who it is, recorded at its birth."""

    ident: procs.Ident  # pid and start time: a pid reused since is never taken for it
    rank: int | None
    host: str
    space: str  # its pid space (procs.pid_space): only a reader in the same one may look


def init_begun_pids(path: str, host: str | None = None) -> list[int]:
    """The pids ``mark_init_begun`` wrote to ``path`` (only those of this pid space, if
    ``host`` is given: the run folder of a launch over several hosts is shared, and another
    host's, or another container's, pid means nothing here)."""
    return [b.ident[0] for b in read_init_begun(path) if host is None or _here(b, host)]


def init_begun_here(path: str | None, host: str) -> dict[int, procs.Ident]:
    """World rank -> identity of the ranks born in this pid space (on ``host``) that marked
    the start of their MPI init."""
    return {b.rank: b.ident for b in read_init_begun(path) if b.rank is not None and _here(b, host)}


def _here(b: Begun, host: str) -> bool:
    """Born in this pid space: the same one where both are known, else the same host name."""
    space = procs.pid_space()
    return b.space == space if space and b.space else b.host == host


def read_init_begun(path: str | None) -> list[Begun]:
    """Every whole record of ``path`` (``pid rank host start space``); others are skipped."""
    out = []
    for f in _init_begun_lines(path):
        if len(f) >= 4 and (f[1].isdigit() or f[1] == "-"):
            rank = int(f[1]) if f[1].isdigit() else None
            space = f[4] if len(f) >= 5 and f[4] != "-" else ""
            out.append(Begun((int(f[0]), f[3]), rank, f[2], space))
    return out


def _init_begun_lines(path: str | None) -> list[list[str]]:
    if not path:
        return []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return [fields for fields in map(str.split, fh) if fields and fields[0].isdigit()]
    except OSError:
        return []


# -- the ranks' side ----------------------------------------------------------------------------
def init_begun_path() -> str | None:
    return os.environ.get(INIT_BEGUN_ENV)


def mark_init_begun() -> None:
    """This rank's process runs and begins MPI initialisation: a job that then ends without
    MPI up lost a rank while starting (it never started), unlike a command that failed on its
    own. Every rank appends a line "pid rank host start space" to one file (one ``write``:
    ranks write at once): its full identity, recorded at its birth, so that a pid reused
    since, or one of another container with the same host name, is never signalled. A line
    that cannot be written only costs that knowledge."""
    path = init_begun_path()
    ident = procs.own() if path else None
    if ident is None:
        return
    rank = ranks.world_rank(os.environ)
    rundir.append_line(
        path,
        f"{ident[0]} {'-' if rank is None else rank} {socket.gethostname()} {ident[1]} "
        f"{procs.pid_space() or '-'}\n",
    )


def stop_requested() -> int | None:
    """The signal the launcher asked this driver to act on (``request_stop``), or None."""
    record = _read_json(os.environ.get(STOP_ENV, "")) if os.environ.get(STOP_ENV) else None
    signum = record.get("signal") if record else None
    return signum if signum in STOP_SIGNALS else None


def mark_mpi_up() -> None:
    _mark(MPI_UP_ENV)


def mark_started() -> None:
    """Every live worker is set up and holds its shards: from now on a failure is recovered,
    or ends the job as a failure, never as "never started"."""
    _mark(STARTED_ENV)


def _mark(env: str) -> None:
    path = os.environ.get(env)
    if path and not os.path.exists(path):
        rundir.write_marker(path, {"pid": os.getpid(), "time": time.time()})


def write_driver() -> None:
    """The driver's identity, for the launcher's signal forwarder (its pid, start time and pid
    space: a pid reused by another process is never signalled)."""
    ident = procs.own()
    rundir.write_marker(
        os.environ.get(DRIVER_PID_ENV),
        {
            "pid": os.getpid(),
            "start": ident[1] if ident else "",
            "space": procs.pid_space(),
            "host": socket.gethostname(),
        },
    )


def relaunches() -> list[dict]:
    """This launch's record of the launches before it that lost a host (oldest first); a
    value that is not a JSON list of objects is ignored."""
    try:
        records = json.loads(os.environ.get(RELAUNCHES_ENV) or "[]")
    except ValueError:
        return []
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []


def write_status(record: dict) -> bool:
    """The driver's verdict for the launcher, which trusts it over mpiexec's exit code."""
    return rundir.write_marker(os.environ.get(STATUS_ENV), record)


def written_status() -> dict | None:
    """The verdict already in the status file, if any (a rank's early one, say)."""
    path = os.environ.get(STATUS_ENV)
    return _read_json(path) if path else None


def status_wanted() -> bool:
    return bool(os.environ.get(STATUS_ENV))
