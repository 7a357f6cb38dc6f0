"""The first run: README's first command builds only what the demo needs; CI runs README's tests."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    block = re.search(r"```bash ci\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_ci_runs_exactly_the_readme_test_command():
    demo, tests = _readme_commands()
    assert demo == "bash scripts/setup.sh && .venv/bin/mixle-mpi demo"
    ci = [
        line
        for line in (REPO / ".ci" / "run").read_text().splitlines()
        if line.startswith("bash scripts/setup.sh")
    ]
    assert ci == [tests] and "--tests" in tests and tests.endswith(".venv/bin/python -m pytest -q")


def _setup(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    """scripts/setup.sh in a copy whose .venv is complete (a stub interpreter that imports
    anything); the Python it would build a new environment with only records its arguments
    and fails. Returns the run and those records."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    stub = tmp_path / ".venv" / "bin" / "python"
    stub.parent.mkdir(parents=True)
    stub.write_text("#!/bin/sh\necho 5.0.11\n")
    record = tmp_path / "built.txt"
    builder = tmp_path / "python3"
    builder.write_text(f'#!/bin/sh\necho "$*" >> {record}\nexit 1\n')
    for exe in (stub, builder):
        exe.chmod(0o755)
    proc = subprocess.run(
        ["bash", str(tmp_path / "scripts" / "setup.sh"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHON": str(builder)},
    )
    return proc, record.read_text() if record.exists() else ""


def test_first_command_does_not_build_the_mpich_environment(tmp_path):
    proc, built = _setup(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert built == ""  # the complete .venv is reused; nothing else is made
    assert "mixle_mpi set up: .venv (Open MPI 5.0.11)" in proc.stdout


def test_the_test_setup_builds_the_mpich_environment(tmp_path):
    proc, built = _setup(tmp_path, "--tests")
    assert proc.returncode != 0 and built == "-m venv .venv-mpich\n", (proc.stderr, built)


def test_an_unknown_setup_option_is_refused(tmp_path):
    proc, built = _setup(tmp_path, "--with-everything")
    assert proc.returncode == 2 and "the only option is --tests" in proc.stderr and built == ""
