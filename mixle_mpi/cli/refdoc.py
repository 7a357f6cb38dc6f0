"""``docs/reference.md``, generated from the code so that it cannot drift from it.

Every command's options come from its own parser, the settings, the table of options and
the other environment variables from the option table (``core/options.py``), the exit codes
from ``core/exitcodes.py``, the launcher's variables from ``launch/contract.py`` and the fault
grammar from ``chaos/fault_plan.py``. Only the events are written by hand here; a unit test
checks that they, and the option table's variables, name exactly what the package emits and
reads. Regenerate with ``python -m mixle_mpi.cli.refdoc --write``.
"""

from __future__ import annotations

import argparse
import inspect
import io
import os
import re
import sys
from contextlib import redirect_stdout

from mixle_mpi.core import options

REFERENCE_PATH = os.path.join("docs", "reference.md")

# Variables a user may set that are not settings of the handle: the options of
# ``core.options`` read from the environment (the settings' are generated too).
ENVIRONMENT = {o.env: o.help for o in options.ENVIRONMENT}

# Every event of events.jsonl, in the order a fit meets them.
EVENTS = {
    "start": "the driver is set up: workers, shards, settings, MPI and BLAS in use",
    "relaunched": "this launch is the launcher's relaunch without lost host(s): which, on how many ranks",
    "ranks": "where each rank runs: rank -> host:pid (the driver is rank 0); the driver's numerics "
    "(baseline, CPU, numpy dispatch, BLAS core, probe hash) and each worker's probe hash",
    "continuation": "how the job will continue after a failure (ulfm, emulated or keep) and why",
    "driver_shards": "the shards the driver computes itself (driver_computes)",
    "loaded": "the workers hold their shards; how long the load took",
    "store_unread": "a worker could not open the shard store; the driver streams its shards",
    "failover_armed": "driver failover is on: which workers may take over",
    "failover_unavailable": "a worker that cannot take over (it cannot read the store or the checkpoint folder)",
    "speculated": "idle workers started copies of a slow worker's outstanding shards (which, onto whom, the paces)",
    "speculation_won": "the shards a speculative copy won in a round, and the seconds it saved by the straggler's pace",
    "rebalanced": "shards moved between rounds from a worker that stayed slow to faster ones, or back (moves, paces)",
    "estep_ahead_off": "the E-step computed ahead was given up for this fit (its guesses missed)",
    "resumed": "the fit resumed from a checkpoint (which file, which iteration)",
    "checkpoint_fallback": "a damaged checkpoint; the previous one (.prev) is read instead",
    "journal_reused": "shard results of an interrupted round read back from the fold journal",
    "checkpoint": "a checkpoint was written (path, iteration, seconds)",
    "numerics_refused": "a worker's numerics probe differs from the driver's: which, on which host, "
    "what differs; it gets no shard (it fails, and its place is recovered)",
    "suspected": "a silent worker whose process is alive is suspected, not failed: why, and that it gets more time",
    "suspicion_cleared": "a suspected worker was heard again: nothing was done (seconds suspected, looks)",
    "failure_detected": "a rank failed: rank, pid, host, how it was seen (ULFM, heartbeat, process gone, stall)",
    "recovery": "a failed rank's shards are recomputed on survivors",
    "shrink": "the communicator was rebuilt without the dead ranks (method, survivors, seconds)",
    "shrink_fallback": "the ULFM shrink did not apply; the emulated one was used",
    "kept": "the communicator is kept as it is; the dead rank is never addressed again",
    "respawn_started": "a replacement process is starting for a failed worker",
    "respawn_ready": "the replacement is set up and holds its shards",
    "respawned": "the replacement took its shards back",
    "spare_adopted": "a hot spare took a failed worker's place",
    "spawn_unavailable": "no replacement could be started; the shards move to the survivors",
    "spawn_abandoned": "a replacement's Spawn still under way at the end was abandoned",
    "migrated": "a place's shards moved to other ranks for good",
    "blacklisted": "a place failed max_retries times and gets no more replacements",
    "driver_failed": "the driver died (who saw it, how)",
    "driver_elected": "a surviving rank drives now",
    "driver_resumed": "the new driver resumed the fit (iteration, seconds since the death)",
    "preempted": "SIGTERM or SIGUSR1: the fit checkpointed and stops (exit 75)",
    "closed": "the driver ended the job (failures survived, wall time)",
}


def launcher_set() -> tuple[str, ...]:
    """The variables of the launcher and rank contract (``launch/contract.py``), and the
    numerics a rank was started under (``core/numerics``: its mark; the baseline's own
    variables are numpy's, OpenBLAS's and numba's)."""
    from mixle_mpi.core import numerics, rundir
    from mixle_mpi.launch import contract

    return (
        rundir.RUN_DIR_ENV,
        contract.TAG_ENV,
        *contract.FILE_VARS,
        contract.RELAUNCHES_ENV,
        numerics.BASELINE_MARK,
    )


def _settings_rows() -> list[tuple[str, str, str]]:
    """(name, default, meaning) of every Settings field, from the option table."""
    return [(o.name, options.show(o.default), o.meaning) for o in options.SETTINGS]


# Where docs/reference.md describes an option given on each surface.
SECTIONS = {
    "setting": "[Settings](#settings)",
    "job": "[fit](#mixle-mpi-fit)",
    "fitjob": "[fitjob](#python--m-mixle_mpifitjob)",
    "env": "[variables](#other-environment-variables)",
}


def _option_rows() -> list[tuple[str, ...]]:
    """Each option once: its type and default, the places it is given (``-``: not there),
    and where this page describes it."""

    def code(text):
        return f"`{text}`" if text else "-"

    rows = []
    for o in options.OPTIONS:
        default = "required" if "(required)" in o.help else options.show(o.default)
        if o.default_text and not o.setting:
            default = o.default_text
        fit_flag = (f"{o.flag}, --no-{o.flag[2:]}" if o.kind is bool else o.flag) if o.job else None
        fitjob = f"`{o.flag}` ({options.show(o.fitjob.default)})" if o.fitjob is not None else "-"
        where = {
            "setting": o.setting,
            "job": o.job,
            "fitjob": o.fitjob is not None,
            "env": bool(o.env),
        }
        rows.append(
            (
                f"`{o.name}`",
                o.kind.__name__,
                default,
                code(o.setting and o.name),
                code(o.job and o.name),
                code(o.env_var),
                code(fit_flag),
                fitjob,
                ", ".join(f"`{f}`" for f in o.flags) or "-",
                ", ".join(SECTIONS[k] for k, on in where.items() if on),
            )
        )
    return rows


def _exit_rows() -> list[tuple[int, str, str]]:
    from mixle_mpi.core import exitcodes

    rows = []
    for line in inspect.getsource(exitcodes).splitlines():
        m = re.match(r"([A-Z_]+) = (\d+)\s*(?:#\s*(.*))?$", line)
        if m:
            rows.append((int(m.group(2)), m.group(1), m.group(3) or ""))
    return sorted(rows)


def _exit_table() -> list[str]:
    """The one table of exit codes in the docs (README and the guides link to it)."""
    from mixle_mpi.core.exitcodes import WHAT_TO_DO

    rows = [(c, f"`{n}`", m, WHAT_TO_DO[c]) for c, n, m in _exit_rows()]
    return _table(("code", "name", "meaning", "what to do"), rows)


def _command_help(parser: argparse.ArgumentParser, name: str | None) -> str:
    """The --help of subcommand ``name`` of ``parser`` (None: of ``parser`` itself)."""
    if name is not None:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001 (argparse's API)
        parser = sub.choices[name]
    out = io.StringIO()
    width = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # the same text whatever terminal generates it
    try:
        with redirect_stdout(out):
            parser.print_help()
    finally:
        if width is None:
            os.environ.pop("COLUMNS")
        else:
            os.environ["COLUMNS"] = width
    return out.getvalue().rstrip()


def _table(header: tuple[str, ...], rows) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        out.append("| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |")
    return out


def render() -> str:
    """The whole reference, as Markdown (pure: the same code gives the same text)."""
    from mixle_mpi.chaos import fault_plan
    from mixle_mpi.cli import helptext
    from mixle_mpi.cli.commands import build_parser
    from mixle_mpi.fitting import fitjob

    parser = build_parser(full_help=True)
    out = [
        "# Reference",
        "",
        "Generated from the code by `python -m mixle_mpi.cli.refdoc --write`; do not edit by hand",
        "(a test fails when this file and the code disagree). The user guide explains; this lists.",
        "",
        "## Commands",
        "",
    ]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    for name in sub.choices:
        out += [f"### `mixle-mpi {name}`", "", "```text", _command_help(parser, name), "```", ""]
    out += [
        "### `python -m mixle_mpi.fitjob`",
        "",
        "```text",
        _command_help(fitjob.build_parser(), None),
        "```",
        "",
    ]
    out += [
        "## Settings",
        "",
        "Arguments of `ResilientMPIEncodedData(...)`; each one also reads `MIXLE_MPI_<NAME>` when it",
        "is not passed (argument > environment variable > default). `mixle-mpi fit` passes those of",
        "its options that name a setting.",
        "",
    ]
    out += _table(
        ("setting", "default", "variable", "meaning"),
        [(f"`{n}`", d, f"`{options.env_var(n)}`", m) for n, d, m in _settings_rows()],
    )
    out += [
        "",
        "## Options",
        "",
        "Every option once (`core/options.py`, from which the settings, the job file, the flags and",
        "this page are made): as a setting of the handle, a key of a `fit --config` job file, an",
        "environment variable, a `mixle-mpi fit` flag, a `python -m mixle_mpi.fitjob` flag (with its",
        "default there) or a flag of another command. A setting given as a `fit` flag or in a job",
        "file overrides its variable; a flag overrides the job file.",
        "",
    ]
    out += _table(
        (
            "option",
            "type",
            "default",
            "setting",
            "job file",
            "variable",
            "`fit` flag",
            "fitjob flag (default)",
            "also",
            "described in",
        ),
        _option_rows(),
    )
    out += ["", "## Other environment variables", ""]
    out += _table(("variable", "meaning"), [(f"`{k}`", v) for k, v in ENVIRONMENT.items()])
    out += [
        "",
        "Set by `mixle-mpi run` for the ranks it starts (the launcher and rank contract,",
        "`launch/contract.py`); never set them yourself:",
        "",
    ]
    out += [", ".join(f"`{v}`" for v in launcher_set()), ""]
    out += ["## Exit codes", ""]
    out += _exit_table()
    out += [
        "",
        "## Events",
        "",
        "One JSON line each in `events.jsonl`, with the time, and the rank, pid and host concerned.",
        "",
    ]
    out += _table(("event", "what happened"), [(f"`{k}`", v) for k, v in EVENTS.items()])
    out += [
        "",
        "## Fault plans",
        "",
        f'`{fault_plan.ENV_VAR}="worker:action:phase[:call[:incarnation[:scope]]],..."` (or `fault_plan=`)',
        "makes a chosen rank act at a fixed point, for tests. Worker 0 is the driver.",
        "",
        f"- actions: {', '.join(f'`{a}`' for a in fault_plan.ACTIONS)}",
        f"- phases: {', '.join(f'`{p}`' for p in fault_plan.PHASES)}",
        f"- phases while the job starts (from the environment): {', '.join(f'`{p}`' for p in fault_plan.STARTUP_PHASES)}"
        f", and `{fault_plan.SPAWN_PHASE}` in a replacement as its process starts",
        f"- the driver's phases: {', '.join(f'`{p}`' for p in fault_plan.DRIVER_PHASES)}",
        f"- scopes: {', '.join(f'`{s}`' for s in fault_plan.SCOPES)}",
        "",
        f"Version {helptext.version()}.",
        "",
    ]
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m mixle_mpi.cli.refdoc", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--write",
        nargs="?",
        const=REFERENCE_PATH,
        default=None,
        metavar="PATH",
        help=f"write the reference to PATH (default: {REFERENCE_PATH}) instead of stdout",
    )
    args = p.parse_args(argv)
    text = render()
    if args.write is None:
        sys.stdout.write(text)
        return 0
    with open(args.write, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
