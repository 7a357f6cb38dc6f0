"""The probes the runtime reports to benchmarks (mixle_mpi.core.probes): who hears what, that
nobody listening costs nothing but the check, and that a failing listener never breaks a fit."""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path

import pytest

from mixle_mpi.core import estep, probes

PKG = Path(__file__).resolve().parents[1] / "mixle_mpi"


@pytest.fixture
def heard():
    """A listener for the test's duration; what it heard, in order."""
    got: list = []
    probes.listen(got.append)
    yield got
    probes.unlisten(got.append)
    assert got.append not in probes.LISTENERS


@probes.spanned("unit_span")
def add(a, b=0):
    return a + b


@probes.spanned("unit_failing")
def fails():
    raise ValueError("boom")


def test_a_span_is_heard_at_its_begin_and_its_end_with_its_call(heard):
    assert add(2, b=3) == 5
    begin, end = heard
    assert (begin.name, begin.phase, begin.args, begin.kwargs) == (
        "unit_span",
        "begin",
        (2,),
        {"b": 3},
    )
    assert (end.name, end.phase, end.result, end.error) == ("unit_span", "end", 5, None)
    assert end.at >= begin.at and end.seconds == pytest.approx(end.at - begin.at, abs=1e-6)


def test_a_span_that_raises_is_heard_ending_with_its_error(heard):
    with pytest.raises(ValueError, match="boom"):
        fails()
    assert [e.phase for e in heard] == ["begin", "end"]
    assert isinstance(heard[1].error, ValueError) and heard[1].result is None


def test_a_mark_is_heard_with_its_arguments(heard):
    probes.mark("unit_mark", 1, "x")
    assert [(e.name, e.phase, e.args) for e in heard] == [("unit_mark", "mark", (1, "x"))]


def test_the_runtimes_own_points_are_heard_under_their_names(heard):
    """estep.shard_result reports the per-shard compute under the names POINTS lists."""

    class Model:
        def seq_log_density(self, x):
            return x

    import numpy as np

    count, ll = estep.shard_result("llsum", Model(), [(2, np.array([1.0, 2.0]))])
    assert (count, ll) == (2.0, 3.0)
    assert [(e.name, e.phase) for e in heard] == [("score_shard", "begin"), ("score_shard", "end")]
    assert {e.name for e in heard} <= set(probes.POINTS)


def test_nobody_listening_hears_nothing_and_the_call_is_unchanged(monkeypatch):
    assert probes.LISTENERS == []
    made = []
    monkeypatch.setattr(probes, "Event", lambda *a, **k: made.append(a))  # no event is even built
    assert add(1, 2) == 3
    probes.mark("unit_mark")
    with pytest.raises(ValueError):
        fails()
    assert made == []


def test_unlisten_stops_hearing_and_tolerates_a_stranger():
    got: list = []
    probes.listen(got.append)
    probes.mark("one")
    probes.unlisten(got.append)
    probes.unlisten(got.append)  # no error
    probes.mark("two")
    assert [e.name for e in got] == ["one"]


def test_a_listener_that_raises_is_removed_and_logged_and_the_call_goes_on(heard, caplog):
    def broken(event):
        raise RuntimeError("listener bug")

    probes.listen(broken)
    with caplog.at_level(logging.WARNING, logger="mixle_mpi.probes"):
        assert add(4) == 4  # the call's own result, whatever its listeners did
    assert broken not in probes.LISTENERS
    assert [(e.name, e.phase) for e in heard] == [
        ("unit_span", "begin"),
        ("unit_span", "end"),
    ]  # others still hear
    warned = [r.getMessage() for r in caplog.records]
    assert (
        len(warned) == 1
        and "'unit_span' (begin)" in warned[0]
        and "RuntimeError: listener bug" in warned[0]
    )


def test_a_decorated_function_keeps_its_name_and_signature():
    import inspect

    assert add.__name__ == "add" and str(inspect.signature(add)) == "(a, b=0)"


def test_every_probe_in_the_package_is_listed_in_points():
    """Each name a listener can hear is documented (POINTS), and each documented one exists."""
    used = set()
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("spanned", "mark")
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                used.add(node.args[0].value)
    assert used == set(probes.POINTS)
    guide = (PKG.parent / "docs" / "developer.md").read_text()
    undocumented = [name for name in probes.POINTS if not re.search(rf"`{name}`", guide)]
    assert undocumented == []
