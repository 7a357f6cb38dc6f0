"""What users type, made what the parser reads: renamed flags, ``--sbatch`` values that start
with a dash, and a suggestion for a mistyped flag.

Names follow what users of mpiexec, srun, sbatch and torchrun expect (``--launcher`` picks
mpiexec or srun, as srun's own ``--mpi`` picks a PMI plugin; ``--max-restarts`` relaunches a
job as torchrun's does; a template ``--max-requeues``). The old names keep working for one
release, with a warning that names the new one. Pure: argv in, argv and warnings out.
"""

from __future__ import annotations

import difflib
import re

# subcommand -> {old flag: new flag}; the old ones go in the release after 0.x (CHANGELOG.md)
RENAMED: dict[str, dict[str, str]] = {
    "fit": {"--mpi": "--launcher", "--resume-retries": "--max-restarts"},
    "run": {"--mpi": "--launcher", "--resume-retries": "--max-restarts"},
    "chaos": {"--mpi": "--launcher", "--resume-retries": "--max-restarts"},
    "demo": {"--ranks": "-n"},
    "slurm": {"--max-restarts": "--max-requeues"},
}
JOINED = {"slurm": ("--sbatch",)}  # flags whose value may itself start with a dash
NO_VALUE = {"-q", "--quiet", "-v", "--verbose", "--allow-many-ranks"}
_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def own_part(argv: list[str]) -> int:
    """How many of ``argv``'s tokens are options of ours: ``run``'s command (after ``--``, or
    its first word after a flag that takes no value) is the user's and is left alone."""
    for i, token in enumerate(argv):
        if token == "--":
            return i
        after_flag = i > 0 and argv[i - 1] in NO_VALUE
        if i > 0 and not token.startswith("-") and (not argv[i - 1].startswith("-") or after_flag):
            return i
    return len(argv)


def rewrite(command: str, argv: list[str]) -> tuple[list[str], list[str]]:
    """(``argv`` of ``command`` with renamed flags renamed and joined values joined, the
    warnings to show)."""
    renamed, joined = RENAMED.get(command, {}), JOINED.get(command, ())
    out, warnings = [], []
    end = own_part(argv) if command == "run" else len(argv)
    i = 0
    while i < len(argv):
        token = argv[i]
        flag, eq, value = token.partition("=")
        if i < end and flag in renamed:
            new = renamed[flag]
            warnings.append(f"{flag} is deprecated and goes in the next release: use {new}")
            token = new + eq + value if new.startswith("--") or not eq else f"{new}{value}"
        if i < end and token in joined and i + 1 < len(argv):
            out.append(f"{token}={argv[i + 1]}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out, warnings


def flags_in(help_text: str) -> list[str]:
    """The flags a parser's help names (public text: no reading of argparse's internals)."""
    return sorted(set(_FLAG.findall(help_text)))


def suggestion(unknown: list[str], known: list[str]) -> str:
    """``; did you mean --max-its?`` for the first unknown flag that is close to one, or ''."""
    for token in unknown:
        if not token.startswith("-"):
            continue
        close = difflib.get_close_matches(token.split("=")[0], known, 1, 0.6)
        if close:
            return f"; did you mean {close[0]}?"
    return ""
