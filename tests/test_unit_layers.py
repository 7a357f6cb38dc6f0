"""The layer rule, checked from the import graph (every import, module-level or inside a
function). Each layer is a package of mixle_mpi; a module imports only its own layer or lower
ones, ``policy`` and ``storage`` never import each other, no imports form a cycle, and no
module imports another module's private names. One package, ``chaos``, is split over two
layers: each of its modules is given its layer by name (``MODULE_LAYER``), and the same rule
holds for each. ARCHITECTURE.md explains the layers."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "mixle_mpi"

# lowest first; a module may import modules of its own layer and of the layers before it.
# "api" is the package root: mixle_mpi/__init__.py, __main__.py and the compatibility names.
RANK = {
    "core": 0,
    "launch": 1,
    "policy": 2,
    "storage": 2,
    "runtime": 3,
    "fitting": 4,
    "sim": 4,
    "cli": 5,
    "api": 6,
}
SIDEWAYS = {"policy", "storage"}  # same rank, and they must not import each other
# The one package split over layers, module by module: the fault plan and the external
# campaign's pure decisions sit with the policy, the hook the ranks fire a plan with (signals,
# threads) with the runtime that calls it; the campaigns a person runs sit with the cli
# (they build fit commands).
# A new module of a split package must be named here, or it is in no layer.
MODULE_LAYER = {
    "chaos.__init__": "policy",
    "chaos.fault_plan": "policy",
    "chaos.fault_actor": "runtime",
    "chaos.external_plan": "policy",
    "chaos.campaign": "cli",
    "chaos.external": "cli",
}


def modules() -> dict[str, Path]:
    """Dotted name under mixle_mpi ('runtime.driver', 'fitloop', '__init__') -> file."""
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).with_suffix("")
        out[".".join(rel.parts)] = path
    return out


def layer(mod: str) -> str:
    if mod in MODULE_LAYER:
        return MODULE_LAYER[mod]
    return mod.split(".")[0] if "." in mod else "api"


def _target(mods: dict, module: str, name: str | None) -> str:
    """The module an ``import`` names: mixle_mpi.X.Y, or X.name when name is a module."""
    rest = module[len("mixle_mpi") :].lstrip(".")
    if name and f"{rest}.{name}".lstrip(".") in mods:
        return f"{rest}.{name}".lstrip(".")
    if not rest:
        return "__init__"
    return rest if rest in mods else f"{rest}.__init__"


def parsed() -> dict[str, ast.Module]:
    return {m: ast.parse(p.read_text()) for m, p in modules().items()}


def imports() -> dict[str, set[str]]:
    """Module -> the mixle_mpi modules it imports (anywhere in its code)."""
    mods = modules()
    graph = {}
    for m, tree in parsed().items():
        deps = set()
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.split(".")[0] == "mixle_mpi"
            ):
                deps |= {_target(mods, node.module, a.name) for a in node.names}
            elif isinstance(node, ast.Import):
                deps |= {
                    _target(mods, a.name, None)
                    for a in node.names
                    if a.name.split(".")[0] == "mixle_mpi"
                }
        graph[m] = deps - {m}
    return graph


def test_every_module_is_in_a_layer_package():
    stray = [m for m in modules() if layer(m) not in RANK]
    assert stray == [], (
        "put the module in one of the layer packages, or in MODULE_LAYER (and in ARCHITECTURE.md)"
    )
    assert {layer(m) for m in modules()} == set(RANK)
    assert set(MODULE_LAYER) <= set(modules()), "MODULE_LAYER names a module that is gone"


def test_a_split_package_spans_two_layers_and_its_low_part_never_imports_its_high_part():
    """``chaos``'s fault hook is imported by the runtime, so it must not pull in the campaigns
    (which import the cli's job config): the low part's imports stay below the cli."""
    graph = imports()
    low = [m for m, lay in MODULE_LAYER.items() if RANK[lay] <= RANK["runtime"]]
    assert low and all(layer(d) != "cli" for m in low for d in graph[m])
    assert {"runtime.driver", "runtime.worker"} <= {
        m for m, deps in graph.items() if "chaos.fault_actor" in deps
    }


def test_no_module_imports_a_higher_layer():
    wrong = [
        f"{m} ({layer(m)}) imports {d} ({layer(d)})"
        for m, deps in imports().items()
        for d in sorted(deps)
        if RANK[layer(d)] > RANK[layer(m)]
        or (layer(m) != layer(d) and {layer(m), layer(d)} == SIDEWAYS)
    ]
    assert wrong == []


def test_layers_do_not_go_through_the_package_root():
    """Inside the layers, nothing imports the root (``from mixle_mpi import X``) or a
    compatibility name: each import names the module that defines the thing."""
    wrong = [
        f"{m} imports {d}"
        for m, deps in imports().items()
        if layer(m) != "api"
        for d in sorted(deps)
        if layer(d) == "api"
    ]
    assert wrong == []


def test_no_import_cycles():
    graph = imports()
    state: dict[str, int] = {}
    cycles = []

    def visit(m, path):
        state[m] = 1
        for d in sorted(graph[m]):
            if d not in graph:
                continue
            if state.get(d) == 1:
                cycles.append(path[path.index(d) :] + [d])
            elif d not in state:
                visit(d, path + [d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_uses_another_modules_private_names():
    """``from mixle_mpi.x import _y`` and ``x._y`` (x an imported mixle_mpi module) are both
    reaching into x's private parts: make the name public, or move the logic."""
    mods = modules()
    wrong = []
    for m, tree in parsed().items():
        aliases = set()
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.split(".")[0] == "mixle_mpi"
            ):
                for a in node.names:
                    if _private(a.name):
                        wrong.append(f"{m}: from {node.module} import {a.name}")
                    elif _target(mods, node.module, a.name) != _target(mods, node.module, None):
                        aliases.add(a.asname or a.name)  # the name is a module
            elif isinstance(node, ast.Import):
                aliases |= {
                    a.asname for a in node.names if a.asname and a.name.startswith("mixle_mpi.")
                }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
            ):
                wrong.append(f"{m}: {node.value.id}.{node.attr}")
    assert wrong == []


def test_the_compatibility_name_still_imports():
    """``python -m mixle_mpi.fitjob`` is the documented built-in job (templates, users' scripts);
    ``mixle_mpi.fit`` is the fit loop."""
    import mixle_mpi
    import mixle_mpi.fitjob
    from mixle_mpi.fitting import fitjob, fitloop

    assert mixle_mpi.fit is fitloop.fit
    assert mixle_mpi.fitjob.main is fitjob.main


# a function a reader holds in view; longer ones are split into named steps. Counted in
# statements (logical lines), so that the formatter's line breaks do not count.
MAX_FUNCTION_LINES = 60


def test_no_function_is_longer_than_a_reader_holds_in_view():
    long = []
    for mod, path in modules().items():
        text = path.read_text(encoding="utf-8")
        tokens = tokenize.generate_tokens(io.StringIO(text).readline)
        ends = [token.start[0] for token in tokens if token.type == tokenize.NEWLINE]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = sum(node.lineno <= line <= node.end_lineno for line in ends)
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{mod}.{node.name}: {lines} lines")
    assert long == [], (
        f"functions over {MAX_FUNCTION_LINES} statements (split them into named steps): {long}"
    )
