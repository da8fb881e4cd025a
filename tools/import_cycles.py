"""Find import cycles among the modules of a package, counting imports placed inside functions.

import-linter (grimp) sees function-level imports too, but its contracts cannot say "no cycle
inside this package"; this check can. It reads the source with the stdlib ``ast`` module, so it
imports nothing it checks. An edge A -> B is any ``import``/``from ... import`` in A, at any
depth, that names module B (``from pkg import name`` is an edge to ``pkg.name`` when that is a
module, else to ``pkg``), except imports under ``if TYPE_CHECKING:`` (they never run). As in
grimp, importing ``a.b.c`` is not counted as importing the packages ``a`` and ``a.b``.

Usage: ``python tools/import_cycles.py [SRC_DIR] [PACKAGE]`` (default ``src pion``); prints each
cycle (a strongly connected component) with one path through it and exits 1 if there is any.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path


def module_files(src: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> its file, for every module under ``src/package``."""
    found = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import node that can run (any depth), skipping ``if TYPE_CHECKING:`` bodies."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``name`` (at ``path``) imports at run time."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in _runtime_imports(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = name.split(".") if is_package else name.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            targets.add(sub if sub in modules else base)
    return {t for t in targets if t in modules and t != name}


def import_graph(src: Path, package: str) -> dict[str, set[str]]:
    files = module_files(src, package)
    names = set(files)
    return {name: imports_of(name, path, names) for name, path in files.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components with more than one module, each sorted, largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(components, key=lambda c: (-len(c), c))


def a_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One closed path through ``component`` (breadth-first from its first module), for the message."""
    members = set(component)
    start = component[0]
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child not in parents:
                    parents[child] = node
                    following.append(child)
        frontier = following
    return component


def main(argv: list[str]) -> int:
    src = Path(argv[1]) if len(argv) > 1 else Path("src")
    package = argv[2] if len(argv) > 2 else "pion"
    graph = import_graph(src, package)
    components = strongly_connected(graph)
    for component in components:
        print(f"import cycle among {len(component)} modules: {', '.join(component)}")
        print("  for example: " + " -> ".join(a_cycle(graph, component)))
    if components:
        print(f"{len(components)} import cycle(s) in {package} (function-level imports counted)")
        return 1
    print(f"no import cycle in {package} ({len(graph)} modules, function-level imports counted)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
