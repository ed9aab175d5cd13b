"""The engine's layering (docs/ARCHITECTURE.md): imports point down only, no cycles, the engine
never imports the add-on and the learned engine never imports the reference simulator.
Imports are read with `ast`, so function-level imports count as much as top-level ones."""
from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parent.parent / "engine"

# package -> the packages it may import (besides itself)
ALLOWED = {
    "core": set(),
    "reference": {"core"},
    "learned": {"core"},
    "training": {"core", "reference", "learned"},
    "api": {"core", "reference", "learned", "training"},
    "evaluation": {"core", "reference", "learned", "training", "api"},
    "cli": {"core", "reference", "learned", "training", "api", "evaluation"},
    "__main__": {"cli"},
    "__init__": set(),
}


def module_name(path: Path) -> str:
    rel = path.relative_to(ENGINE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def engine_imports(path: Path):
    """(imported module, line) for every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                if node.module is None:  # from . import x
                    for alias in node.names:
                        yield f"{target}.{alias.name}", node.lineno
                    continue
            else:
                target = node.module or ""
            yield target, node.lineno


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def all_modules():
    return {module_name(p): p for p in ENGINE.rglob("*.py")}


def resolve(name: str, modules) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph():
    modules = all_modules()
    graph = {m: set() for m in modules}
    for name, path in modules.items():
        for target, _ in engine_imports(path):
            if target == "engine" or target.startswith("engine."):
                hit = resolve(target, modules)
                if hit and hit != name and hit != "engine":
                    graph[name].add(hit)
    return graph


def test_the_engine_never_imports_the_addon_or_bpy():
    bad = [f"{module_name(p)}:{line} imports {t}" for p in ENGINE.rglob("*.py") for t, line in engine_imports(p)
           if t.split(".")[0] in ("neurok_blender", "bpy", "bpy_extras", "mathutils")]
    assert not bad, bad


def test_imports_point_down_the_layers_only():
    graph = import_graph()
    bad = []
    for name, targets in graph.items():
        here = layer(name)
        for t in targets:
            there = layer(t)
            if there != here and there not in ALLOWED[here]:
                bad.append(f"{name} ({here}) imports {t} ({there})")
    assert not bad, bad


def test_no_import_cycles_inside_the_engine():
    graph = import_graph()
    state, stack, cycles = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, [" -> ".join(c) for c in cycles]


def test_the_checker_sees_a_violation():
    """The parser resolves relative imports: `from ..reference.simulator import X` in learned/ is found."""
    tree_file = ENGINE / "learned" / "_probe_for_test.py"
    tree_file.write_text("def f():\n    from ..reference.simulator import ReferenceSimulator\n")
    try:
        targets = [t for t, _ in engine_imports(tree_file)]
        assert "engine.reference.simulator" in targets
    finally:
        tree_file.unlink()
