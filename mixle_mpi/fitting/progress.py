"""One progress line per EM iteration on the driver.

In a batch log each iteration gets its own compact line, so ``tail -f slurm-123.out`` reads
like a table; in a terminal the line is rewritten in place. Under mpiexec a rank's stdout
may be a pseudo-terminal whatever the user's is, so "a terminal" is what ``mixle-mpi run``
saw on its own stdout, passed down as ``MIXLE_MPI_LIVE_PROGRESS=1``.
The formatting is pure and unit-tested; :class:`Progress` only keeps time and writes.

With a ``record`` path, each iteration also replaces ``progress.json`` (atomically, a few
hundred bytes) in the fit's out_dir: what ``mixle-mpi status`` shows of a running job.
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import time
from dataclasses import dataclass
from typing import IO

from mixle_mpi.core import procs
from mixle_mpi.core.atomicfile import write_json

LIVE_ENV = "MIXLE_MPI_LIVE_PROGRESS"
PROGRESS_FILE = "progress.json"
RECORD_FORMAT = "mixle_mpi.progress"
ETA_AFTER = (
    3  # iterations of this job segment before an ETA is shown: the first one includes the start
)


@dataclass(frozen=True)
class Status:
    iteration: int
    max_its: int
    ll: float
    prev_ll: float | None
    seconds: float  # this iteration's wall time
    recent: tuple  # recent iteration times, for the ETA
    live: int
    blacklisted: int
    recovered: int  # shards recomputed on another rank so far
    restart: str = ""  # "r/R" when fitting restarts
    failed: int = 0  # worker failures survived so far
    checkpointed: bool = False  # a checkpoint was written after this iteration
    slow: tuple = ()  # (worker, times slower than the median) of each slow worker


def eta_seconds(s: Status) -> float | None:
    """Upper bound: the remaining iterations at the recent median pace (EM may converge
    sooner). None until ``ETA_AFTER`` iterations ran in this segment: the first one also
    sets up and initializes, and an ETA from it alone is wildly off."""
    if len(s.recent) < ETA_AFTER or s.iteration >= s.max_its:
        return None
    return (s.max_its - s.iteration) * statistics.median(s.recent)


def stop_reason(lls: list[float], max_its: int, delta: float | None) -> str:
    """Why EM stopped, from its log-likelihood trace (pure): "converged" (it gained less than
    ``delta``), "max_its" (the iteration cap), or "unchanged": with ``delta`` None mixle has
    no convergence test, but still stops when an EM step no longer improves the
    log-likelihood, which then stopped changing at all."""
    gain = lls[-1] - lls[-2] if len(lls) >= 2 else None
    if delta is not None and (len(lls) < max_its or (gain is not None and 0 <= gain < delta)):
        return "converged"
    return "max_its" if len(lls) >= max_its else "unchanged"


def may_end_em(iteration: int, gain: float, max_its: int, delta: float | None) -> bool:
    """Whether mixle's EM loop may stop after this step (pure): at the iteration cap, or on a
    gain below ``delta`` (converged; a rejected step reports a gain of exactly 0.0, which
    also ends the loop when ``delta`` is None). Such a step gets no resumable checkpoint:
    mixle tests convergence against the step before, which a loop resumed from this one
    would not have, so it would run one step more; and a loop resumed at the cap would be
    asked for zero iterations. The finished checkpoint is written right after it instead,
    and a driver lost in between resumes from the step before and replays this one."""
    return iteration >= max_its or (0.0 <= gain < delta if delta is not None else gain == 0.0)


def stop_text(reason: str, delta: float | None = None) -> str:
    """How a fit stopped, in words (pure); ``reason`` from :func:`stop_reason`."""
    if reason == "converged":
        return "converged" + (
            f": the log-likelihood gained less than delta={delta:g}" if delta is not None else ""
        )
    if reason == "unchanged":
        return (
            "stopped when the log-likelihood stopped changing: delta none turns the convergence test off, "
            "but mixle still ends EM when a step no longer improves the log-likelihood"
        )
    return "stopped at the iteration cap"


def hms(seconds: float | None) -> str:
    """Seconds as h:mm:ss ('-' for unknown)."""
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def summary_stop_text(summary: dict) -> str:
    """How the fit of a summary.json stopped (pure); a summary written before "stopped"
    existed has only "converged"."""
    reason = summary.get("stopped") or ("converged" if summary.get("converged") else "max_its")
    return stop_text(reason, (summary.get("config") or {}).get("delta"))


def summary_wall_text(summary: dict) -> str:
    """``12.3s``, or with requeues ``4.1s (this segment; 12.3s over 3 segments)`` (pure)."""
    text = f"{summary.get('wall_seconds', 0):.1f}s"
    if summary.get("segments", 1) > 1:
        text += f" (this segment; {summary.get('wall_seconds_total', 0):.1f}s over {summary['segments']} segments)"
    return text


def format_line(s: Status) -> str:
    dll = "-" if s.prev_ll is None else f"{s.ll - s.prev_ll:+.3e}"
    head = f"restart {s.restart} " if s.restart else ""
    eta = eta_seconds(s)
    return (
        f"{head}it {s.iteration}/{s.max_its} ll {s.ll:.10g} dll {dll} {s.seconds:.3f}s/it "
        f"{s.live} workers ({s.failed} failed, {s.blacklisted} blacklisted)"
        + (
            f" {s.recovered} shard{'s' if s.recovered != 1 else ''} recomputed"
            if s.recovered
            else ""
        )
        + (f" slow: {', '.join(f'w{w} x{x:g}' for w, x in s.slow)}" if s.slow else "")
        + (f" eta<={hms(eta)}" if eta is not None else "")
        + (" checkpointed" if s.checkpointed else "")
    )


def ranks_of(membership, driver_takeovers: int = 0) -> dict:
    """The worker ranks by state, from a :class:`~mixle_mpi.policy.membership.Membership` (pure):
    live ones, the failure count of each rank that ever failed, blacklisted ones, and how
    many times the driver died and a survivor took over."""
    return {
        "live": membership.live(),
        "failures": {str(w): n for w, n in membership.failures().items() if n},
        "blacklisted": membership.blacklisted(),
        "driver_takeovers": driver_takeovers,
    }


def record(s: Status, ranks: dict | None, meta: dict, now: float) -> dict:
    """The content of progress.json after an iteration (pure): everything ``status`` shows,
    so that it never has to parse the progress line."""
    return {
        "format": RECORD_FORMAT,
        "version": 1,
        "updated": now,
        **meta,
        "restart": s.restart,
        "iteration": s.iteration,
        "max_its": s.max_its,
        "ll": s.ll,
        "dll": None if s.prev_ll is None else s.ll - s.prev_ll,
        "last_seconds": s.seconds,
        "seconds_per_iteration": statistics.median(s.recent) if s.recent else None,
        "eta_seconds": eta_seconds(s),
        "recovered_shards": s.recovered,
        "slow": {str(w): x for w, x in s.slow},
        "ranks": ranks
        if ranks is not None
        else {"live_count": s.live, "blacklisted_count": s.blacklisted},
    }


class Progress:
    """Writes a Status per iteration to ``stream``: 'line', 'live', 'off' or 'auto'; and,
    given ``record`` (a path), the same as JSON for ``mixle-mpi status``, whatever the mode.
    ``meta`` goes into every record (the model and data of the fit, say)."""

    def __init__(
        self,
        stream: IO[str] | None = None,
        mode: str = "auto",
        window: int = 5,
        record: str | None = None,
        meta: dict | None = None,
    ) -> None:
        self.record_path = record
        ident = procs.identity(
            os.getpid()
        )  # who writes: ``status`` tells a live driver by it, not by a pid
        self.meta = {
            "pid": os.getpid(),
            "start": ident[1] if ident else "",
            "space": procs.pid_space(),
            "host": socket.gethostname(),
            **(meta or {}),
        }
        self.stream = stream or sys.stdout
        if mode == "auto":
            mode = "live" if os.environ.get(LIVE_ENV) == "1" else "line"
        self.mode = mode
        self.window = window
        self._times: list[float] = []
        self._last = time.perf_counter()
        self._open_live = False

    def start(self) -> None:
        self._last = time.perf_counter()
        self._times.clear()

    def step(
        self,
        *,
        iteration: int,
        max_its: int,
        ll: float,
        prev_ll: float | None,
        live: int,
        blacklisted: int,
        recovered: int,
        restart: str = "",
        ranks: dict | None = None,
        failed: int = 0,
        checkpointed: bool = False,
        slow: dict | None = None,
    ) -> Status:
        """Report one iteration; ``ranks`` (see :func:`ranks_of`) goes into the record."""
        now = time.perf_counter()
        seconds, self._last = now - self._last, now
        self._times.append(seconds)
        status = Status(
            iteration,
            max_its,
            ll,
            prev_ll,
            seconds,
            tuple(self._times[-self.window :]),
            live,
            blacklisted,
            recovered,
            restart,
            failed,
            checkpointed,
            tuple(sorted((slow or {}).items())),
        )
        if self.mode == "line":
            self.stream.write("[fit] " + format_line(status) + "\n")
        elif self.mode == "live":
            self.stream.write("\r\x1b[K" + format_line(status))
            self._open_live = True
        self.stream.flush()
        if self.record_path:
            write_json(self.record_path, record(status, ranks, self.meta, time.time()))
        return status

    def done(self) -> None:
        """End a live line (the next output starts on a line of its own)."""
        if self._open_live:
            self.stream.write("\n")
            self.stream.flush()
            self._open_live = False
