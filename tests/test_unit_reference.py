"""docs/reference.md is generated from the code, and the two hand-written tables in its
generator (events, environment variables) name exactly what the package emits and reads."""

from __future__ import annotations

import pathlib
import re
from dataclasses import fields

from mixle_mpi.cli import reference
from mixle_mpi.core.settings import ENV_PREFIX, Settings

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mixle_mpi"


def _source() -> str:
    return "\n".join(p.read_text() for p in PACKAGE.rglob("*.py") if p.name != "reference.py")


def test_the_committed_reference_is_the_generated_one():
    committed = (ROOT / reference.REFERENCE_PATH).read_text()
    assert committed == reference.render(), (
        "docs/reference.md is out of date: run .venv/bin/python -m mixle_mpi.cli.reference --write"
    )


def test_every_emitted_event_is_documented_and_every_documented_one_is_emitted():
    source = _source()
    emitted = set(re.findall(r'emit\(\s*"([a-z_]+)"', source))
    emitted |= set(re.findall(r'_bring_up\([^)]*?"([a-z_]+)"', source))
    assert emitted - set(reference.EVENTS) == set(), "events emitted but not in reference.EVENTS"
    for name in reference.EVENTS:
        assert f'"{name}"' in source, f"reference.EVENTS documents {name!r}, which nothing emits"


def test_every_environment_variable_the_package_reads_is_documented():
    source = _source() + "\n".join(p.read_text() for p in PACKAGE.rglob("*.sh"))
    found = set(re.findall(r"MIXLE_MPI_[A-Z_]*[A-Z]", source))
    settings = {ENV_PREFIX + f.name.upper() for f in fields(Settings)}
    documented = settings | set(reference.ENVIRONMENT) | set(reference.launcher_set())
    prefixes = {
        "MIXLE_MPI_DRIVER_PID",
        "MIXLE_MPI_INIT_BEGUN",
    }  # prose naming a contract file's variable
    assert found - documented - prefixes == set()
    assert set(reference.ENVIRONMENT) <= found, (
        "reference.ENVIRONMENT names a variable nothing reads"
    )
