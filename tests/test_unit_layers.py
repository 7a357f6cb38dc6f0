"""The layer rule, checked from the import graph (every import, module-level or inside a
function): a module imports only its own layer or lower ones, and no imports form a cycle.
ARCHITECTURE.md explains the layers; a new module must be placed in one here."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "mixle_mpi"

# lowest first; a module may import modules of its own layer and of the layers before it
LAYERS = {
    "base": "errors validate exitcodes deadlines atomicjson privatefile logs blas malloc codec estep reaper",
    "policy": "membership heartbeat placement rounds reconfig simulation faults config jobwatch chaos_plan",
    "storage": "store checkpoint journal events",
    "runtime": "transport monitor worker driver handle startup shrink exiting rankwrapper",
    "fit": "fitloop fitjob models reference progress",
    "cli": ("cli cmdrun launcher chaos chaos_external demo inspector plot slurm collect datainput modelspec "
            "fitcmd dryrun status modelview helptext jobconfig __main__ __init__"),
}
RANK = {"base": 0, "policy": 1, "storage": 1, "runtime": 2, "fit": 3, "cli": 4}
WHERE = {m: layer for layer, names in LAYERS.items() for m in names.split()}


def imports() -> dict[str, set[str]]:
    """Module -> the package modules it imports (anywhere in its code)."""
    mods = {p.stem for p in PKG.glob("*.py")}
    graph = {}
    for m in sorted(mods):
        deps = set()
        for node in ast.walk(ast.parse((PKG / f"{m}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "mixle_mpi":
                deps |= {a.name for a in node.names if a.name in mods}
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mixle_mpi."):
                deps.add(node.module.split(".")[1])
        graph[m] = deps - {m}
    return graph


def test_every_module_has_a_layer():
    assert sorted(set(imports()) - set(WHERE)) == [], "place the new module in a layer (and in ARCHITECTURE.md)"


def test_no_module_imports_a_higher_layer():
    wrong = [f"{m} ({WHERE[m]}) imports {d} ({WHERE[d]})" for m, deps in imports().items() for d in sorted(deps)
             if RANK[WHERE[d]] > RANK[WHERE[m]] or {WHERE[m], WHERE[d]} == {"policy", "storage"}]
    assert wrong == []


def test_no_import_cycles():
    graph = imports()
    state: dict[str, int] = {}
    cycles = []

    def visit(m, path):
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append(path[path.index(d):] + [d])
            elif d not in state:
                visit(d, path + [d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []
