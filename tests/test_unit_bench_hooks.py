"""The benchmarks see inside a fit only through what the package offers (its probes,
mixle_mpi.core.probes, and its public names): no file in bench/ patches the package, and
none uses a private name of it. A static scan of bench/*.py (flow-insensitive: a name
bound by importing mixle_mpi, or assigned from such a name, is the package's)."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def root(node: ast.AST) -> str | None:
    """The name an expression starts from: ``a`` of ``a.b(c)[d].e``."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def package_names(tree: ast.AST) -> set[str]:
    """Names bound to mixle_mpi modules, classes or functions, and (to a fixpoint) the names
    assigned from them (an instance, a collaborator reached through it)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {
                (a.asname or a.name.split(".")[0])
                for a in node.names
                if a.name.split(".")[0] == "mixle_mpi"
            }
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "mixle_mpi":
            names |= {a.asname or a.name for a in node.names}
    bindings = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bindings += [(t.id, node.value) for t in targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.withitem) and isinstance(node.optional_vars, ast.Name):
            bindings.append((node.optional_vars.id, node.context_expr))
    while True:
        more = {name for name, value in bindings if root(value) in names} - names
        if not more:
            return names
        names |= more


def violations(source: str) -> list[str]:
    """Each line of ``source`` that patches the package or uses a private name of it."""
    tree = ast.parse(source)
    pkg = package_names(tree)
    out = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for t in targets:
            for sub in t.elts if isinstance(t, ast.Tuple) else [t]:
                if isinstance(sub, ast.Attribute) and root(sub) in pkg:
                    out.append(f"line {node.lineno}: assigns {ast.unparse(sub)}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
            and root(node.args[0]) in pkg
        ):
            out.append(f"line {node.lineno}: {node.func.id} on {ast.unparse(node.args[0])}")
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and root(node) in pkg
        ):
            out.append(f"line {node.lineno}: private {ast.unparse(node)}")
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "mixle_mpi":
            out += [
                f"line {node.lineno}: imports private {a.name}"
                for a in node.names
                if a.name.startswith("_")
            ]
    return out


def test_no_benchmark_patches_the_package_or_uses_its_private_names():
    found = {p.name: v for p in sorted(BENCH.glob("*.py")) if (v := violations(p.read_text()))}
    assert found == {}, (
        "use the package's probes (mixle_mpi/core/probes.py) or a public name instead"
    )


def test_the_scan_finds_each_way_of_patching():
    """The scan is not vacuous: the patches the benchmarks used to make are each found."""
    old = """
from mixle_mpi.runtime import worker
from mixle_mpi.runtime.transport import Backoff
import mixle_mpi.core.estep as estep
from mixle_mpi import ResilientMPIEncodedData
from mixle_mpi.fitting import models

def instrument(timing_dir):
    worker.Worker._body = stamp(worker.Worker._body)
    estep.estep_shard = wrap(estep.estep_shard)
    Backoff.__init__ = init
    setattr(worker.Worker, "recv", recv)
    enc = ResilientMPIEncodedData(None)
    drv = enc._driver
    drv.run_round = timed_round
    est = models._diag(dim=16)
"""
    found = violations(old)
    assert {int(f.split(":")[0].split()[1]) for f in found} == {9, 10, 11, 12, 14, 15, 16}, (
        found
    )  # not line 13
    for what in (
        "assigns worker.Worker._body",
        "assigns estep.estep_shard",
        "assigns Backoff.__init__",
        "setattr on worker.Worker",
        "private enc._driver",
        "assigns drv.run_round",
        "private models._diag",
    ):
        assert any(what in f for f in found), (what, found)


def test_the_scan_leaves_the_benchmarks_own_objects_alone():
    mine = """
from bench import _job
import mixle as mx

_job.write_json = mine
mx.something = 1
setattr(obj, "name", wrapper)
"""
    assert violations(mine) == []
