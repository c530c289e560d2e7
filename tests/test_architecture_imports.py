"""No import circles between the modules of ``src/fleetgate``.

The graph is read from the source with :mod:`ast` (nothing is imported): every ``import`` and
``from ... import`` anywhere in a module counts, function-level lazy imports included, except
those under ``if TYPE_CHECKING:`` (they never run). ``from pkg import name`` points at ``pkg``
(whose ``__init__.py`` runs first) and also at ``pkg.name`` when that is a module, as
``../shared/tools/imports.py`` counts it.

``python tests/test_architecture_imports.py`` prints the arrows between the top-level packages
(``pytest -s`` shows them too).
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "fleetgate"

Graph = dict[str, set[str]]

# Circles that exist today and are being removed by other work; each entry must match one
# strongly connected component of the graph exactly, so a new module joining a known circle
# fails, and an entry whose circle is gone fails too (delete it then). Target: empty.
KNOWN_CYCLES: list[frozenset[str]] = []


def module_files(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__.py``)."""
    out: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _import_nodes(nodes: Iterable[ast.AST]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement in or under ``nodes``, skipping ``if TYPE_CHECKING:`` bodies."""
    for node in nodes:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _import_nodes(node.orelse)  # the ``else:`` does run
        else:
            yield from _import_nodes(ast.iter_child_nodes(node))


def _from_base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a ``from X import ...`` reads from."""
    if node.level == 0:
        return node.module or ""
    parts = module.split(".")
    if not is_package:
        parts.pop()
    if node.level > 1:
        parts = parts[: -(node.level - 1)]
    return ".".join([*parts, node.module] if node.module else parts)


def imports_of(module: str, source: str, known: set[str], *, is_package: bool = False) -> set[str]:
    """The modules of ``known`` that ``module`` imports (its edges in the graph)."""
    out: set[str] = set()
    for node in _import_nodes([ast.parse(source)]):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
            continue
        base = _from_base(module, is_package, node)
        if base in known:  # ``from pkg import mod`` runs pkg/__init__.py first: an edge to pkg
            out.add(base)
        out.update(t for alias in node.names if (t := f"{base}.{alias.name}") in known)
    out.discard(module)
    return out


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> Graph:
    files = module_files(root, package)
    known = set(files)
    return {
        name: imports_of(
            name, path.read_text(encoding="utf-8"), known, is_package=path.name == "__init__.py"
        )
        for name, path in files.items()
    }


def circles(graph: Mapping[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def cycle_path(graph: Mapping[str, set[str]], component: frozenset[str]) -> list[str]:
    """One concrete circle inside ``component``: ``a -> b -> ... -> a`` (shortest from min)."""
    start = min(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt: list[str] = []
        for node in frontier:
            for dep in sorted(graph[node] & component):
                if dep == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if dep not in parents:
                    parents[dep] = node
                    nxt.append(dep)
        frontier = nxt
    return [start]


def _short(module: str) -> str:
    return module.removeprefix(f"{PACKAGE}.").replace(".", "/")


def describe(graph: Mapping[str, set[str]], component: frozenset[str]) -> str:
    members = ", ".join(_short(m) for m in sorted(component))
    path = " -> ".join(_short(m) for m in cycle_path(graph, component))
    return f"{{{members}}}: {path}"


def top_level(module: str) -> str:
    """``fleetgate.safety.policy`` -> ``safety``; a root module (``fleetgate.errors``) is itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_arrows(graph: Mapping[str, set[str]]) -> Counter[tuple[str, str]]:
    """How many module imports go from each top-level package to each other one."""
    arrows: Counter[tuple[str, str]] = Counter()
    for module, deps in graph.items():
        for dep in deps:
            a, b = top_level(module), top_level(dep)
            if a != b:
                arrows[(a, b)] += 1
    return arrows


def format_package_arrows(graph: Mapping[str, set[str]]) -> str:
    """One line per source package: ``safety -> errors(3), telemetry(1)``; ``<->`` pairs last."""
    arrows = package_arrows(graph)
    by_source: dict[str, list[str]] = {}
    for (a, b), n in sorted(arrows.items()):
        by_source.setdefault(a, []).append(f"{b}({n})")
    lines = [f"{a} -> {', '.join(targets)}" for a, targets in sorted(by_source.items())]
    both = sorted({tuple(sorted(pair)) for pair in arrows if pair[::-1] in arrows})
    lines += [f"{a} <-> {b}  ({arrows[(a, b)]} / {arrows[(b, a)]})" for a, b in both]
    return "\n".join(lines)


def test_no_import_circles_beyond_the_known_ones() -> None:
    graph = import_graph()
    print("\npackage arrows (module imports between top-level packages):")
    print(format_package_arrows(graph))
    found = circles(graph)
    new = [c for c in found if c not in KNOWN_CYCLES]
    gone = [c for c in KNOWN_CYCLES if c not in found]
    report = [f"new import circle {describe(graph, c)}" for c in new]
    report += [
        f"KNOWN_CYCLES lists {sorted(_short(m) for m in c)}, which is no longer a circle "
        "(or has changed): update the list"
        for c in gone
    ]
    assert not report, "\n".join(report)


def test_the_graph_follows_lazy_relative_and_submodule_imports_but_not_type_checking() -> None:
    # ``from pkg import mod`` counts pkg too: ``from fleetgate.safety import base`` in
    # safety/audit.py made a circle through safety/__init__.py that this graph missed and
    # ../shared/tools/imports.py reported.
    known = {"p", "p.a", "p.b", "p.c", "p.d", "p.e", "p.sub", "p.sub.x"}
    source = (
        "from typing import TYPE_CHECKING\n"
        "import typing\n"
        "from . import b\n"  # a submodule of the package
        "from .sub import x, helper\n"  # x is a module, helper a name in p.sub
        "if TYPE_CHECKING:\n"
        "    from p.c import C\n"
        "if typing.TYPE_CHECKING:\n"
        "    import p.c\n"
        "else:\n"
        "    import p.e\n"
        "def f():\n"
        "    from p.d import thing\n"  # lazy imports still run
        "    return thing\n"
    )
    # ``from . import b`` runs p/__init__.py, then p.b: both are edges
    assert imports_of("p.a", source, known) == {"p", "p.b", "p.sub", "p.sub.x", "p.d", "p.e"}
    assert imports_of("p.sub", "from .. import a\nfrom . import x\n", known, is_package=True) == {
        "p",
        "p.a",
        "p.sub.x",
    }
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert circles(graph) == [frozenset({"a", "b", "c"})]
    assert cycle_path(graph, frozenset({"a", "b", "c"})) == ["a", "b", "c", "a"]
    assert format_package_arrows({"fleetgate.x.m": {"fleetgate.y"}, "fleetgate.y": set()}) == (
        "x -> y(1)"
    )


if __name__ == "__main__":
    print(format_package_arrows(import_graph()))
