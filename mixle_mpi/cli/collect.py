"""``mixle-mpi collect DIR...``: pick the best of several fits (best-of-N random restarts).

Each DIR is a task's output folder, or a folder of such folders (an array's ``out_dir``).
A task's summary is the first of ``SUMMARY_FILES`` found in its folder: ``summary.json``
(written by ``mixle-mpi fit``) or ``result.json`` (written by ``python -m mixle_mpi.fitjob
--out``). Its final log-likelihood is ``final_ll``, else the last entry of ``ll``; the report names the task's
``model.json`` too when there is one. The best
task is the one with the highest final log-likelihood; ties go to the first in path order,
so the choice does not depend on the order the tasks finished in. A task without a summary
(it failed, or is still running) is skipped and listed; if no task has one, the error lists
what each folder held.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from mixle_mpi.core.atomicfile import write_text
from mixle_mpi.core.errors import ConfigError

SUMMARY_FILES = ("summary.json", "result.json")


def final_ll(summary: dict) -> float:
    """The final log-likelihood of one summary; ConfigError if it has none."""
    if "final_ll" in summary:
        value = summary["final_ll"]
    elif isinstance(summary.get("ll"), list) and summary["ll"]:
        value = summary["ll"][-1]
    else:
        raise ConfigError(
            f"summary {summary.get('path', '?')} has no final log-likelihood "
            "(needed 'final_ll' or a non-empty 'll' list)"
        )
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"summary {summary.get('path', '?')}: final log-likelihood {value!r} is not a number"
        ) from None


def pick_best(summaries: list[dict]) -> dict:
    """The summary with the highest final log-likelihood (pure).

    NaN never wins; ties go to the first in the given order. Raises ConfigError on an
    empty list or when no summary has a usable log-likelihood.
    """
    if not summaries:
        raise ConfigError("no summaries to choose from")
    from mixle_mpi.cli.fitcmd import best_restart  # the same rule as `mixle-mpi fit --restarts`

    usable = [s for s in summaries if not math.isnan(final_ll(s))]
    if not usable:
        raise ConfigError(
            "every summary's final log-likelihood is NaN: "
            + ", ".join(str(s.get("path", "?")) for s in summaries)
        )
    return usable[best_restart([{"ll": [final_ll(s)]} for s in usable])]


def _summary_in(folder: str) -> str | None:
    for name in SUMMARY_FILES:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    return None


def find_summaries(dirs: list[str]) -> tuple[list[str], list[str]]:
    """(summary paths in sorted order, what was found instead where there was none)."""
    found, notes = [], []
    for d in dirs:
        if not os.path.isdir(d):
            notes.append(f"{d}: not a folder")
            continue
        own = _summary_in(d)
        if own:
            found.append(own)
            continue
        subdirs = sorted(e.path for e in os.scandir(d) if e.is_dir())
        inner = [p for p in (_summary_in(s) for s in subdirs) if p]
        found += inner
        without = [s for s in subdirs if not _summary_in(s)]
        for s in without:
            notes.append(
                f"{s}: no summary (holds: {', '.join(sorted(os.listdir(s))) or 'nothing'})"
            )
        if not subdirs:
            notes.append(
                f"{d}: no summary and no task folders (holds: {', '.join(sorted(os.listdir(d))) or 'nothing'})"
            )
    return sorted(set(found)), notes


def load(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            record = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: unreadable summary ({type(exc).__name__}: {exc})") from None
    if not isinstance(record, dict):
        raise ConfigError(f"{path}: a summary must be a JSON object; found {type(record).__name__}")
    return {**record, "path": path}


def collect(dirs: list[str]) -> dict:
    """The best task of ``dirs``: its summary, its path, and every candidate's final log-likelihood."""
    paths, notes = find_summaries(dirs)
    if not paths:
        raise ConfigError(
            f"no task produced a summary ({' or '.join(SUMMARY_FILES)}) under "
            f"{', '.join(dirs)}; found:\n  " + "\n  ".join(notes or ["nothing"])
        )
    summaries, problems = [], list(notes)
    for p in paths:
        try:
            s = load(p)
            final_ll(s)
        except ConfigError as exc:
            problems.append(str(exc))
            continue
        summaries.append(s)
    if not summaries:
        raise ConfigError("no usable summary; found:\n  " + "\n  ".join(problems))
    best = pick_best(summaries)
    model = os.path.join(os.path.dirname(best["path"]), "model.json")
    return {
        "best": best["path"],
        "final_ll": final_ll(best),
        "model": model if os.path.isfile(model) else None,
        "candidates": [{"path": s["path"], "final_ll": final_ll(s)} for s in summaries],
        "skipped": problems,
        "summary": {k: v for k, v in best.items() if k != "path"},
    }


def _cmd_collect(args) -> int:
    report = collect(args.dirs)
    for line in report["skipped"]:
        sys.stderr.write(f"[mixle_mpi] collect: skipped {line}\n")
    sys.stderr.write(
        f"[mixle_mpi] collect: best of {len(report['candidates'])} is {report['best']} "
        f"(final log-likelihood {report['final_ll']!r})\n"
    )
    text = json.dumps(report, indent=1)
    if args.out in (None, "-"):
        sys.stdout.write(text + "\n")
    else:
        write_text(args.out, text + "\n")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "dirs", nargs="+", metavar="DIR", help="a task's output folder, or a folder of them"
    )
    p.add_argument(
        "-o",
        "--out",
        default=None,
        help="write the report (best path, its summary, all candidates) here; default stdout",
    )
    p.set_defaults(func=_cmd_collect)


def add_subcommand(subparsers) -> None:
    """Register ``mixle-mpi collect``."""
    add_arguments(
        subparsers.add_parser(
            "collect",
            help="pick the best model of an array's tasks",
            description=__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    )


def main(argv=None) -> int:
    """``python -m mixle_mpi.cli.collect``: the same as ``mixle-mpi collect``."""
    from mixle_mpi.cli.cmdrun import module_main

    return module_main("collect", __doc__, add_arguments, argv)


if __name__ == "__main__":
    sys.exit(main())
