"""docs/reference.md is generated from the code, and the two hand-written tables in its
generator (events, environment variables) name exactly what the package emits and reads."""

from __future__ import annotations

import pathlib
import re
from dataclasses import fields

from mixle_mpi.cli import refdoc
from mixle_mpi.core.settings import ENV_PREFIX, Settings

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mixle_mpi"


def _source() -> str:
    return "\n".join(p.read_text() for p in PACKAGE.rglob("*.py") if p.name != "refdoc.py")


def test_the_committed_reference_is_the_generated_one():
    committed = (ROOT / refdoc.REFERENCE_PATH).read_text()
    assert committed == refdoc.render(), (
        "docs/reference.md is out of date: run .venv/bin/python -m mixle_mpi.cli.refdoc --write"
    )


def test_every_emitted_event_is_documented_and_every_documented_one_is_emitted():
    source = _source()
    emitted = set(re.findall(r'emit\(\s*"([a-z_]+)"', source))
    emitted |= set(re.findall(r'_bring_up\([^)]*?"([a-z_]+)"', source))
    assert emitted - set(refdoc.EVENTS) == set(), "events emitted but not in refdoc.EVENTS"
    for name in refdoc.EVENTS:
        assert f'"{name}"' in source, f"refdoc.EVENTS documents {name!r}, which nothing emits"


def test_every_environment_variable_the_package_reads_is_documented():
    source = _source() + "\n".join(p.read_text() for p in PACKAGE.rglob("*.sh"))
    found = set(re.findall(r"MIXLE_MPI_[A-Z_]*[A-Z]", source))
    settings = {ENV_PREFIX + f.name.upper() for f in fields(Settings)}
    documented = settings | set(refdoc.ENVIRONMENT) | set(refdoc.launcher_set())
    prefixes = {
        "MIXLE_MPI_DRIVER_PID",
        "MIXLE_MPI_INIT_BEGUN",
    }  # prose naming a contract file's variable
    assert found - documented - prefixes == set()
    assert set(refdoc.ENVIRONMENT) <= found, "refdoc.ENVIRONMENT names a variable nothing reads"
