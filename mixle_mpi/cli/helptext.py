"""``--help`` for people: every option shows its default, and docstrings used as
descriptions lose their reStructuredText markup (````x````, ``:func:`x```).

Module docstrings make good subcommand descriptions, but they are written for Sphinx;
:func:`polish` turns them into plain text once, for every parser of the command.
"""

from __future__ import annotations

import argparse
import copy
import re

_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")  # :func:`mixle_mpi.x.y` / :class:`~a.B`
_LITERAL = re.compile(r"``([^`]+)``")  # ``code``


def plain(text: str | None) -> str | None:
    """``text`` without reStructuredText roles and literal markup (pure)."""
    if not text:
        return text
    text = _ROLE.sub(lambda m: m.group(1), text)
    return _LITERAL.sub(lambda m: m.group(1), text)


def version() -> str:
    """The installed package's version (its metadata), else the source tree's."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("mixle-mpi")
    except PackageNotFoundError:
        from mixle_mpi.core.version import VERSION

        return VERSION


def command(python: str | None = None) -> str:
    """How to run ``mixle-mpi`` from any folder, for advice a user copies: the console
    script beside this interpreter (where pip put it), else ``python -m mixle_mpi``, both
    with full paths (a bare ``mixle-mpi`` is often not on PATH: a venv that is not active)."""
    import os
    import shlex
    import sys

    python = python or sys.executable
    script = os.path.join(os.path.dirname(python), "mixle-mpi")
    if os.access(script, os.X_OK):
        return shlex.quote(script)
    return f"{shlex.quote(python)} -m mixle_mpi"


class DefaultsFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to an option's help unless the help already names its
    default; an unset default reads "none" rather than Python's ``None``."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            not action.option_strings
            or action.required
            or "default" in text.lower()
            or "(required)" in text
            or action.default is argparse.SUPPRESS
            or isinstance(action, (argparse._HelpAction, argparse._VersionAction))
        ):
            return text
        shown = "none" if action.default is None else "%(default)s"
        if action.default is False and action.nargs == 0:
            shown = "off"
        return f"{text} (default: {shown})".lstrip()

    def _format_action(self, action: argparse.Action) -> str:
        # argparse prints nothing after an option that has no help; show its default there
        if action.option_strings and action.help is None and not action.required:
            action = copy.copy(action)
            action.help = ""
            action.help = self._get_help_string(action)
        return super()._format_action(action)


class RawDefaultsFormatter(argparse.RawDescriptionHelpFormatter, DefaultsFormatter):
    """The same, keeping a multi-paragraph description's line breaks."""


# What each subcommand's --help says it is for, written for the people who run it (the
# modules' docstrings are for the people who maintain them).
DESCRIPTIONS = {
    "run": "Launch any command on N MPI ranks with the flags each MPI library needs to survive a rank's "
    "death (Open MPI: --with-ft ulfm; MPICH: -disable-auto-cleanup and a rank wrapper). Returns the "
    "driver's exit code. Example: mixle-mpi run -n 5 -- python my_fit.py",
    "inspect": "Show, for a person, what a fit's files hold: an output folder or summary.json (what happened "
    "to which rank, when, how it was detected, where its shards were recomputed and how long it "
    "took), a checkpoint (iteration, trace, checksum; DAMAGED when it is), a fitted model.json "
    "(weights, means, covariances, transitions, rates) or a shard store. ck.h5 stands for every "
    "restart's checkpoint (ck.r0.h5, ck.r1.h5, ...).",
    "collect": "Pick the best of several fits (best-of-N random restarts, a SLURM job array). Each DIR is a "
    "fit's output folder, or a folder of them. The best fit has the highest final log-likelihood; "
    "ties go to the first in path order. A folder without a summary (a failed or running task) "
    "is listed and skipped.",
    "status": "How a running or finished fit is doing, read from its output folder alone (so it works "
    "from a login node while the job runs, and never disturbs it): state, iteration, "
    "log-likelihood, time per iteration, ETA, live, failed and blacklisted ranks, which rank "
    "runs where, and the last events.",
    "demo": "Fit a 3-component Gaussian mixture to the built-in Iris data on a few MPI ranks twice: once "
    "undisturbed, once with a worker SIGKILLed in the middle of an E-step. Prints both results and "
    "checks that they are equal to the last bit; exits 1 if they are not.",
    "slurm": "Write a SLURM batch script for a resilient fit. Kinds: ft (recommended: mpiexec inside the "
    "allocation, checkpoints, failover, requeue on preemption and time limit), srun (ranks "
    "started by srun itself, for sites that require it; a dead worker's place goes to a spare or "
    "its shards to the survivors) and array (best of N random restarts; then mixle-mpi collect). "
    "The script runs mixle-mpi fit --config job.toml in the folder you submit from; SLURM's "
    "warning signal before the time limit makes the fit checkpoint and requeue itself.",
}


def polish(parser: argparse.ArgumentParser) -> None:
    """Plain-text description and defaults in the help of ``parser``."""
    parser.description = plain(parser.description)
    parser.epilog = plain(parser.epilog)
    raw = "\n" in (parser.description or "")
    parser.formatter_class = RawDefaultsFormatter if raw else DefaultsFormatter
