"""The code an answer depends on, definition by definition: a fingerprint of the functions,
classes and constants a few entry points reach inside engine/, so that a kept answer (the oracle's,
the noise floor's; `physics_cache.kept_stamp`) goes stale when code it runs changes, and not when a
comment, a docstring or an unrelated function in the same file does.

What is followed: the names a definition uses that resolve, through its module's top-level
definitions or its relative imports (`from ..learned.subspace import held_pins`, or `from ..learned
import subspace` then `subspace.held_pins`), to another definition in engine/. A class counts whole,
its methods with it. What is not: calls on an object whose class the code never names (its
module must be named in `skip` or in an entry), and folders in `skip` (for the kept answers, core/
and reference/, whose physics the reference's physics version stamps).

Each definition is hashed as its syntax tree without docstrings (`ast.dump`: formatting and
comments do not count).
"""
from __future__ import annotations

import ast
import hashlib
from pathlib import Path

ENGINE = Path(__file__).resolve().parent.parent


class ModuleIndex:
    """One engine module's top-level definitions and where its imported names come from."""

    def __init__(self, root: Path, rel: str):
        self.rel = rel
        tree = ast.parse((root / rel).read_text())
        self.definitions = {}
        for node in tree.body:
            for name in defined_names(node):
                self.definitions[name] = node
        self.imports = {}       # local name -> (module rel path, definition name or None for a module)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                self._add_import(root, node)

    def _add_import(self, root: Path, node: ast.ImportFrom):
        package = Path(self.rel).parent
        for _ in range(node.level - 1):
            package = package.parent
        base = package.joinpath(*node.module.split(".")) if node.module else package
        for alias in node.names:
            local = alias.asname or alias.name
            as_module = base / f"{alias.name}.py"
            if (root / as_module).is_file():
                self.imports[local] = (as_module.as_posix(), None)
            elif (root / base.with_suffix(".py")).is_file():
                self.imports[local] = (base.with_suffix(".py").as_posix(), alias.name)
            elif (root / base / "__init__.py").is_file():
                self.imports[local] = ((base / "__init__.py").as_posix(), alias.name)


def defined_names(node) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def without_docstrings(node):
    """A copy of the definition's tree with every docstring left out."""
    node = ast.parse(ast.unparse(node)).body[0]
    for n in ast.walk(node):
        body = getattr(n, "body", None)
        if (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            n.body = body[1:] or [ast.Pass()]
    return node


def references(module: ModuleIndex, node) -> set[tuple[str, str]]:
    """(module, definition) pairs the definition's code names."""
    found = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            if n.id in module.definitions:
                found.add((module.rel, n.id))
            elif n.id in module.imports and module.imports[n.id][1] is not None:
                found.add(module.imports[n.id])
        elif (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
              and module.imports.get(n.value.id, ("", ""))[1] is None and n.value.id in module.imports):
            found.add((module.imports[n.value.id][0], n.attr))
    return found


def reached_definitions(entries, skip=(), root: Path = ENGINE) -> dict[tuple[str, str], str]:
    """{(module, name): its tree without docstrings} for every definition the entries
    ((module rel path, name) pairs) reach, modules under `skip` left out."""
    modules, reached, todo = {}, {}, list(entries)
    while todo:
        rel, name = todo.pop()
        if (rel, name) in reached or any(rel.startswith(s) for s in skip):
            continue
        if rel not in modules:
            modules[rel] = ModuleIndex(root, rel)
        module = modules[rel]
        node = module.definitions.get(name)
        if node is None:
            if name in module.imports and module.imports[name][1] is not None:
                todo.append(module.imports[name])     # a name the module re-exports
            continue
        reached[(rel, name)] = ast.dump(without_docstrings(node))
        todo.extend(references(module, node))
    return reached


def code_fingerprint(entries, skip=(), root: Path = ENGINE) -> str:
    """sha1 of the definitions `entries` reach (`reached_definitions`), in a fixed order."""
    h = hashlib.sha1()
    for (rel, name), tree in sorted(reached_definitions(entries, skip, root).items()):
        h.update(f"{rel}:{name}\n".encode())
        h.update(tree.encode())
    return h.hexdigest()
