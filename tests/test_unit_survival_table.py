"""The user guide's "What survives what" table and the tests behind it (docs/developer.md,
"What survives what: the tests"): every mark in the table names tests, every named test
exists, and every cell says what happens or that it is not tested."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n#", start + len(heading))
    return text[start : end if end > 0 else len(text)]


def _user_rows() -> list[list[str]]:
    table = _section((ROOT / "docs" / "user-guide.md").read_text(), "## What survives what")
    rows = [
        ln.strip("|").split("|")
        for ln in table.splitlines()
        if ln.startswith("| ") and not ln.startswith("| failure")
    ]
    return [[c.strip() for c in r] for r in rows]


def _developer_marks() -> dict[str, str]:
    table = _section(
        (ROOT / "docs" / "developer.md").read_text(), "### What survives what: the tests"
    )
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| ([A-Z]\d) \| (.*) \|$", table, re.M)}


def test_every_cell_is_backed_by_tests_or_says_it_is_not():
    rows = _user_rows()
    assert len(rows) == 5 and all(len(r) == 7 for r in rows), rows
    marks = _developer_marks()
    for row in rows:
        for cell in row[1:]:
            found = re.findall(r"\[([A-Z]\d)\]", cell)
            assert found or cell == "not tested", (
                f"a cell with neither a mark nor 'not tested': {cell!r}"
            )
            for mark in found:
                assert mark in marks, f"mark {mark} of the user guide is not in docs/developer.md"
    used = {m for row in rows for cell in row[1:] for m in re.findall(r"\[([A-Z]\d)\]", cell)}
    assert used == set(marks), (
        f"marks in docs/developer.md but not in the table: {set(marks) - used}"
    )


def test_every_test_named_for_a_mark_exists():
    for mark, text in _developer_marks().items():
        names = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", text)
        assert names or text.startswith("the same"), f"{mark} names no test"
        for path, name in names:
            source = (ROOT / path).read_text()
            assert re.search(rf"^def {name}\(", source, re.M), (
                f"{mark}: {path}::{name} does not exist"
            )
