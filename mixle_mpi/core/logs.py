"""Log lines a person reads, through the standard :mod:`logging` module.

Every rank logs to its stderr through one logger tree, ``mixle_mpi``, with levels:
``-q``/``-v`` on ``mixle-mpi fit`` and ``run`` (or ``MIXLE_MPI_LOG_LEVEL``, which the
launcher passes to every rank) choose what is shown. A line carries a wall-clock time
(``12:03:07``), never an epoch float; events.jsonl keeps the machine time. A line never
carries a NUL or another control character: an MPI error string (a C buffer) can hold one,
and a NUL in a batch log makes ``grep`` call the file binary. Python warnings are routed
here as one line, without the source line that ``warnings`` would print under it.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
import warnings

LEVEL_ENV = "MIXLE_MPI_LOG_LEVEL"
LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
ROOT = "mixle_mpi"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # everything but tab and newline


def get(name: str = "") -> logging.Logger:
    """The logger of a part of mixle_mpi (``get("launcher")`` is the logger ``mixle_mpi.launcher``)."""
    return logging.getLogger(f"{ROOT}.{name}" if name else ROOT)


def clean(text: str) -> str:
    """``text`` without NULs and other control characters (pure): NUL is dropped, the
    others are shown as ``\\xNN`` so that nothing is silently lost."""
    return _CONTROL.sub(lambda m: "" if m.group() == "\x00" else f"\\x{ord(m.group()):02x}", text)


def clock(t: float, ms: bool = False) -> str:
    """An epoch time as a person reads it: ``12:03:07`` (``12:03:07.125`` with ``ms``)."""
    text = time.strftime("%H:%M:%S", time.localtime(t))
    return f"{text}.{int(t % 1 * 1000):03d}" if ms else text


def level_from(quiet: bool = False, verbose: bool = False, environ=None) -> tuple[int, str | None]:
    """The level to log at and a warning about a bad ``MIXLE_MPI_LOG_LEVEL`` (pure):
    ``-v`` > ``-q`` > the environment variable > INFO."""
    if verbose:
        return logging.DEBUG, None
    if quiet:
        return logging.WARNING, None
    raw = (os.environ if environ is None else environ).get(LEVEL_ENV, "")
    if not raw.strip():
        return logging.INFO, None
    level = LEVELS.get(raw.strip().lower())
    if level is None:
        return (
            logging.INFO,
            f"{LEVEL_ENV}={raw!r} is not a log level; valid levels are {list(LEVELS)}; using 'info'",
        )
    return level, None


def level_name(level: int) -> str:
    """The ``MIXLE_MPI_LOG_LEVEL`` value for ``level`` (to pass it on to the ranks)."""
    return {v: k for k, v in LEVELS.items()}.get(level, "info")


class LineFormatter(logging.Formatter):
    """``[mixle_mpi] 12:03:07 message``; warnings and errors say so after the time."""

    def format(self, record: logging.LogRecord) -> str:
        head = f"[mixle_mpi] {clock(record.created)} "
        if record.levelno >= logging.ERROR:
            head += "error: "
        elif record.levelno >= logging.WARNING:
            head += "warning: "
        return head + clean(record.getMessage())


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` for every rank: one log line with the warning's category and
    message. No file and source line: a library's warning points at whichever caller its
    stack level names, which tells a user nothing."""
    get("warnings").warning(f"{category.__name__}: {' '.join(str(message).split())}")


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a line is logged (it may be replaced)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def setup(level: int | None = None) -> logging.Logger:
    """Send mixle_mpi's log lines to stderr at ``level`` (default: from the environment),
    once per process, and route Python warnings to them. Returns the root logger of
    mixle_mpi. A later call only changes the level."""
    logger = get()
    configured = any(getattr(h, "_mixle_mpi", False) for h in logger.handlers)
    if level is None and configured:
        return logger  # a level chosen by -q/-v stays
    problem = None
    if level is None:
        level, problem = level_from()
    logger.setLevel(level)
    if not configured:
        handler = _StderrHandler()
        handler._mixle_mpi = True  # type: ignore[attr-defined]
        handler.setFormatter(LineFormatter())
        logger.addHandler(handler)
        logger.propagate = False
        warnings.showwarning = show_warning
    if problem:
        logger.warning(problem)
    return logger
