"""The package's shape: no function over 60 lines or with more than 8 parameters, imports that never go round in a
circle, and each room importing only its own floor and the floors below (:data:`FLOORS`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "peagle_lab"
MAX_LINES, MAX_PARAMS = 60, 8


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = (path, ast.parse(path.read_text()))
    return out


MODULES = _modules()


def _functions():
    for name, (path, tree) in MODULES.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{name}.{node.name} ({path.relative_to(PKG.parent)}:{node.lineno})", node


def _params(fn) -> int:
    a = fn.args
    n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
    return n - (1 if a.args and a.args[0].arg in ("self", "cls") else 0)


def test_no_function_is_over_60_lines():
    long = [f"{where}: {fn.end_lineno - fn.lineno + 1} lines" for where, fn in _functions()
            if fn.end_lineno - fn.lineno + 1 > MAX_LINES]
    assert not long, "split these into named steps:\n" + "\n".join(long)


def test_no_function_takes_more_than_8_parameters():
    many = [f"{where}: {_params(fn)} parameters" for where, fn in _functions() if _params(fn) > MAX_PARAMS]
    assert not many, "group what travels together into a settings object:\n" + "\n".join(many)


def _imports(name: str, tree: ast.Module) -> set[str]:
    """The peagle_lab modules ``name`` imports, at module level or inside a function (a lazy import is still a
    dependency)."""
    pkg = name if MODULES[name][0].name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names if a.name.startswith("peagle_lab")}
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                root = pkg.split(".")
                root = root[: len(root) - (n.level - 1)]
                base = ".".join(root + ([n.module] if n.module else []))
            if not base.startswith("peagle_lab"):
                continue
            for a in n.names:  # `from . import x` may name a module
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base)
    return {m for m in out if m in MODULES and m != name}


def _cycles() -> list[list[str]]:
    graph = {name: _imports(name, tree) for name, (_, tree) in MODULES.items()}
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return sccs


def _is_package_export(cycle: list[str]) -> bool:
    """A package's ``__init__`` re-exporting its own modules, which import siblings through it, is not a circle
    between rooms: every member is that package or inside it."""
    pkgs = [m for m in cycle if MODULES[m][0].name == "__init__.py"]
    return len(pkgs) == 1 and all(m == pkgs[0] or m.startswith(pkgs[0] + ".") for m in cycle)


def test_module_imports_never_go_round_in_a_circle():
    bad = [c for c in _cycles() if not _is_package_export(c)]
    assert not bad, "import circles:\n" + "\n".join(" <-> ".join(c) for c in bad)


# The floors, lowest first (docs/architecture.md): every module at the top of the package (settings, models,
# prompts, precision, atomic, ...) is floor 0; rooms on one floor may use each other, never a room above.
FLOORS = [("features",), ("drafter",), ("decoding",), ("bench", "distill", "training", "serving"),
          ("experiments", "workbook", "tools"),
          ("cli",)]


def floor_of(module: str) -> int:
    """The floor of a ``peagle_lab`` module: its room's, or 0 for a module at the top of the package."""
    parts = module.split(".")
    inside = len(parts) > 2 or (len(parts) == 2 and MODULES[module][0].name == "__init__.py")
    room = parts[1] if inside else None
    return next((i + 1 for i, rooms in enumerate(FLOORS) if room in rooms), 0)


def upward_imports(modules=None) -> dict[str, list[str]]:
    """Module -> the modules it imports from a higher floor than its own (lazy imports included)."""
    modules = MODULES if modules is None else modules
    up = {name: sorted(m for m in _imports(name, tree) if floor_of(m) > floor_of(name))
          for name, (_, tree) in modules.items()}
    return {k: v for k, v in up.items() if v}


def test_every_room_is_on_a_floor_and_every_top_level_module_on_the_ground():
    rooms = {name.split(".")[1] for name, (path, _) in MODULES.items() if path.name == "__init__.py" and
             name.count(".") == 1}
    assert rooms == {r for floor in FLOORS for r in floor}, "put each room on a floor of FLOORS"
    assert floor_of("peagle_lab.models") == floor_of("peagle_lab.target_check") == 0
    assert floor_of("peagle_lab.drafter.heads") < floor_of("peagle_lab.decoding.speculative") < \
        floor_of("peagle_lab.training.trainer") < floor_of("peagle_lab.cli.extract")


def test_no_module_imports_one_on_a_higher_floor():
    up = upward_imports()
    assert not up, "imports that run back up:\n" + "\n".join(f"{k} -> {', '.join(v)}" for k, v in up.items())


def test_an_import_running_back_up_is_found(tmp_path):
    """The check above sees a lazy import from a low module to a high one (here the ground floor's models.py
    importing the serving room inside a function)."""
    tree = ast.parse("def load():\n    from .serving import engine\n")
    fake = {**MODULES, "peagle_lab.models": (MODULES["peagle_lab.models"][0], tree)}
    assert upward_imports(fake) == {"peagle_lab.models": ["peagle_lab.serving.engine"]}
