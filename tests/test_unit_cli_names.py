"""Flags as users of mpiexec, srun, sbatch and torchrun expect them: renamed flags with their
old names as deprecated aliases, a suggestion for a typo, ``--sbatch`` in both forms and the
SLURM placement options (issue 48)."""

from __future__ import annotations

import sys

import pytest

from mixle_mpi.cli import argvfix, slurm
from mixle_mpi.cli.commands import main
from mixle_mpi.core.errors import ConfigError


@pytest.mark.parametrize(
    "command, argv, expected",
    [
        ("fit", ["--mpi", "srun", "-n", "3"], ["--launcher", "srun", "-n", "3"]),
        ("fit", ["--mpi=srun"], ["--launcher=srun"]),
        ("run", ["--resume-retries", "2", "--", "py", "--mpi", "x"],
         ["--max-restarts", "2", "--", "py", "--mpi", "x"]),
        ("run", ["-n", "2", "-q", "py", "--mpi"], ["-n", "2", "-q", "py", "--mpi"]),
        ("demo", ["--ranks", "3"], ["-n", "3"]),
        ("demo", ["--ranks=3"], ["-n3"]),
        ("slurm", ["ft", "--max-restarts", "1", "--sbatch", "--partition=debug"],
         ["ft", "--max-requeues", "1", "--sbatch=--partition=debug"]),
    ],
)  # fmt: skip
def test_old_names_are_renamed_with_a_warning(command, argv, expected):
    out, warnings = argvfix.rewrite(command, argv)
    assert out == expected
    assert bool(warnings) == (out[:2] != argv[:2] and "--sbatch" not in argv[:1])


def test_a_mistyped_flag_gets_the_closest_one(capsys):
    with pytest.raises(SystemExit) as end:
        main(["fit", "--data", "builtin:iris", "--model", "gmm:k=2", "--max-iter", "5"])
    assert end.value.code == 2
    assert (
        "unrecognized arguments: --max-iter 5; did you mean --max-its?" in capsys.readouterr().err
    )
    assert argvfix.suggestion(["--no-such-thing"], ["--max-its"]) == ""


def test_deprecated_aliases_still_work(capsys, tmp_path):
    assert main(["slurm", "ft", "--max-restarts", "2", "--python", "py"]) == 0
    captured = capsys.readouterr()
    assert "MAX_RESTARTS=2" in captured.out and "use --max-requeues" in captured.err


def test_sbatch_takes_both_forms_and_refuses_what_is_not_a_directive():
    assert slurm.sbatch_directive("--partition=debug") == "--partition=debug"
    assert slurm.sbatch_directive("partition=debug") == "--partition=debug"
    assert slurm.sbatch_directive("-C ib") == "-C ib"
    for bad, needle in (
        ("#SBATCH -p x", "is not an sbatch option"),
        ("--time=5", "give `mixle-mpi slurm --time` instead"),
        ("--requeue", "the template sets it"),
    ):
        with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
            slurm.sbatch_directive(bad)


def test_placement_options_render_as_directives(capsys):
    argv = ["slurm", "ft", "--partition", "debug,long", "--account", "p-1", "--mem", "16G",
            "--nodes", "2-3", "--sbatch", "--constraint=ib"]  # fmt: skip
    assert main(argv) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("#SBATCH")]
    for line in ("--partition=debug,long", "--account=p-1", "--mem=16G", "--nodes=2-3",
                 "--constraint=ib"):  # fmt: skip
        assert f"#SBATCH {line}" in lines
    with pytest.raises(ConfigError, match="--mem must be megabytes"):
        slurm.render("ft", mem="lots")
    with pytest.raises(ConfigError, match="given twice"):
        slurm.render("ft", partition="a", sbatch=("partition=b",))


def test_python_defaults_to_the_interpreter_running_the_command(capsys):
    assert main(["slurm", "ft"]) == 0
    assert f"PY={sys.executable}" in capsys.readouterr().out
