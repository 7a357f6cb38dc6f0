"""``--help`` and ``--version`` as a user reads them: defaults everywhere, no reST markup."""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import re
import subprocess
import sys

import pytest

import mixle_mpi
from mixle_mpi.cli import helptext
from mixle_mpi.cli.commands import build_parser, main


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


PARSER = build_parser()
FULL = build_parser(full_help=True)
ALL = {
    "mixle-mpi": PARSER,
    **subparsers(PARSER),
    **{f"{k} (--help-all)": v for k, v in subparsers(FULL).items()},
}


def test_version_comes_from_the_package_metadata(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"mixle-mpi {md.version('mixle-mpi')}"
    assert md.version("mixle-mpi") == mixle_mpi.__version__


def test_version_from_the_command_line():
    proc = subprocess.run(
        [sys.executable, "-m", "mixle_mpi", "--version"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and proc.stdout.strip() == f"mixle-mpi {mixle_mpi.__version__}"


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_option_shows_its_default(name):
    parser = ALL[name]
    formatter = parser._get_formatter()
    missing = []
    for action in parser._actions:
        if (
            not action.option_strings
            or isinstance(action, (argparse._HelpAction, argparse._VersionAction))
            or action.help == argparse.SUPPRESS
        ):
            continue
        text = formatter._format_action(action)  # the option's lines, exactly as --help prints them
        if action.required or "(required)" in text:
            continue
        if "default" not in text.lower():
            missing.append(action.option_strings[-1])
    assert not missing, f"{name} --help shows no default for {missing}"


@pytest.mark.parametrize("name", sorted(ALL))
def test_help_has_no_docstring_markup(name):
    text = ALL[name].format_help()
    assert "``" not in text and not re.search(r":[a-z]+:`", text), text


@pytest.mark.parametrize("name", sorted(ALL))
def test_help_speaks_to_users_not_developers(name):
    text = " ".join(ALL[name].format_help().split())
    for word in (
        "mixle_mpi.cli",
        "mixle_mpi.runtime",
        "mixle_mpi.launch",
        "mixle_mpi.chaos",
        "golden",
        "SignalForwarder",
        "SUMMARY_FILES",
        "unit-tested",
        "pure function",
    ):
        assert word not in text, f"{name} --help says {word!r}"


def test_every_subcommand_says_what_it_is_for():
    for name, parser in subparsers(PARSER).items():
        assert parser.description and len(parser.description) > 40, name


def test_fit_help_fits_on_a_screen_and_help_all_has_the_rest(capsys):
    env = {**os.environ, "COLUMNS": "80"}
    short = subprocess.run(
        [sys.executable, "-m", "mixle_mpi", "fit", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    full = subprocess.run(
        [sys.executable, "-m", "mixle_mpi", "fit", "--help-all"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert short.returncode == 0 and full.returncode == 0
    assert len(short.stdout.splitlines()) <= 60, short.stdout
    for group in ("launch:", "data and model:", "EM:", "resilience:", "output:"):
        assert group in short.stdout and group in full.stdout
    assert "--help-all" in short.stdout
    assert "--heartbeat-timeout" not in short.stdout and "--heartbeat-timeout" in full.stdout


def test_fit_defaults_are_the_real_ones_not_none():
    text = ALL["fit (--help-all)"].format_help()
    flat = " ".join(text.split())
    for needle in (
        "EM iterations at most (default: 100)",
        "(default: 1e-09)",
        "(default: 0.4, or MIXLE_MPI_HEARTBEAT_PERIOD)",
        "(default: all columns)",
        "--dry-run",
        "ck.r0.h5, ck.r1.h5",
    ):
        assert needle in flat, needle
    assert "(default: None)" not in text


@pytest.mark.parametrize(
    "text, plain",
    [
        ("``mixle-mpi run`` starts", "mixle-mpi run starts"),
        (
            "see :func:`mixle_mpi.chaos.fault_actor.record_fired`.",
            "see mixle_mpi.chaos.fault_actor.record_fired.",
        ),
        (
            "(:class:`~mixle_mpi.launch.launcher.SignalForwarder`)",
            "(mixle_mpi.launch.launcher.SignalForwarder)",
        ),
        ("no markup", "no markup"),
        (None, None),
    ],
)
def test_plain_removes_roles_and_literals(text, plain):
    assert helptext.plain(text) == plain


def test_advice_names_a_command_that_runs_as_printed(tmp_path):
    """The demo's advice ("run: ... inspect ...") must work from any folder, venv active or not."""
    import shlex
    import subprocess

    from mixle_mpi.cli.helptext import command

    bindir = tmp_path / "bin"
    bindir.mkdir()
    python = bindir / "python"
    assert command(str(python)) == f"{python} -m mixle_mpi"  # no console script beside it
    script = bindir / "mixle-mpi"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert command(str(python)) == str(script)
    here = command()  # this interpreter's: run it with no venv on PATH, from another folder
    env = {
        "PATH": "/usr/bin:/bin",
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
    }
    proc = subprocess.run(
        shlex.split(here) + ["--version"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
        env=env,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("mixle-mpi "), (here, proc.stderr)
