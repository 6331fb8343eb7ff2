"""The package's shape: no function over 60 lines or with more than 8 parameters, and imports that never go round
in a circle (each room imports downwards)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "peagle_lab"
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


@pytest.mark.parametrize("room", ["decoding", "drafter", "features"])
def test_the_lower_rooms_never_import_the_upper_ones(room):
    upper = ("peagle_lab.bench", "peagle_lab.training", "peagle_lab.serving", "peagle_lab.workbook", "peagle_lab.cli")
    wrong = {name: sorted(m for m in _imports(name, tree) if m.startswith(upper))
             for name, (_, tree) in MODULES.items() if name.startswith(f"peagle_lab.{room}")}
    wrong = {k: v for k, v in wrong.items() if v}
    assert not wrong, f"{room}/ imports rooms above it: {wrong}"
