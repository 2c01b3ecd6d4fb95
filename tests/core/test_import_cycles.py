"""No import cycle in ``rft_core``: the package's import graph, built from the source with ``ast``,
has no cycle, and a failure names each one (``a (line 3) -> b (line 9) -> a``).

What counts as an edge ``a -> b``: an ``import`` / ``from ... import`` statement in module ``a``
that names module ``b`` of the package, at module level AND inside functions or classes (a
deferred import still makes ``a`` depend on ``b``: deferring them is how the launcher <->
explorer and stages <-> validate cycles hid), relative imports resolved. ``from p import x`` is
an edge to ``p.x`` when that is a module, else to ``p``; ``import p.q`` one to ``p.q``. Not
counted: imports under ``if TYPE_CHECKING:`` (never run), and the implicit import of a package's
``__init__`` when one of its submodules is imported (Python runs it, but the importer does not
name it). A package ``__init__`` importing a submodule that imports the package back is a cycle
like any other.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

Graph = dict[str, dict[str, int]]  # module -> {module it imports: line of the first such import}


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
    return name == "TYPE_CHECKING"


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[list[str]]:
    """Per imported name, the candidates it may be, most specific first."""
    if isinstance(node, ast.Import):
        return [[alias.name] for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the module's own package upwards
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, base] if base else package)
    return [[f"{base}.{alias.name}", base] for alias in node.names]


def _statements(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree`` except those under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return found


def _resolve(candidates: list[str], modules: dict[str, Path]) -> str | None:
    """The first candidate that is a module of the package, else the longest module prefix of
    the last one (``import p.q`` where ``q`` is no module: ``p``), else None (not ours)."""
    for name in candidates:
        if name in modules:
            return name
    name = candidates[-1]
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path, package: str) -> Graph:
    """The import graph of ``package`` (a directory under ``root``), as the module doc says."""
    modules = {_module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}
    graph: Graph = {}
    for module, path in modules.items():
        edges: dict[str, int] = {}
        for node in _statements(ast.parse(path.read_text(), filename=str(path))):
            for candidates in _imported(node, module, path.name == "__init__.py"):
                target = _resolve(candidates, modules)
                if target is not None and target != module:
                    edges[target] = min(edges.get(target, node.lineno), node.lineno)
        graph[module] = dict(sorted(edges.items()))
    return graph


def find_cycles(graph: Graph) -> list[list[str]]:
    """One cycle ``[a, b, ..., a]`` for each strongly connected set of two or more modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm; the package is far below the recursion limit
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = {stack.pop()}
            while v not in component:
                component.add(stack.pop())
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted(_shortest_cycle(min(c), c, graph) for c in components)


def _shortest_cycle(start: str, members: set[str], graph: Graph) -> list[str]:
    """The shortest ``start -> ... -> start`` inside one strongly connected set (breadth first)."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in graph[v]:
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if w in members and w not in came_from:
                    came_from[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"no cycle through {start}")


def describe(cycle: list[str], graph: Graph) -> str:
    arrows = [f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False)]
    return " -> ".join([*arrows, cycle[-1]])


def test_rft_core_has_no_import_cycle():
    graph = import_graph(ROOT, "rft_core")
    assert len(graph) > 50 and graph["rft_core.launcher"]  # the whole package was read
    cycles = [describe(c, graph) for c in find_cycles(graph)]
    assert not cycles, "import cycles in rft_core:\n" + "\n".join(cycles)


def test_the_graph_sees_deferred_and_package_cycles_and_skips_type_checking(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        # a <-> b only through a function-level import
        "a.py": "import pkg.b\n",
        "b.py": "def f():\n    from pkg import a\n",
        # c -> d under TYPE_CHECKING only: no cycle
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import d\n",
        "d.py": "from pkg.c import something\n",
        # a package __init__ importing a submodule that imports the package back
        "sub/__init__.py": "from pkg.sub import impl\nREGISTRY = {}\n",
        "sub/impl.py": "from . import REGISTRY\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.c"] == {} and graph["pkg.d"] == {"pkg.c": 1}
    cycles = find_cycles(graph)
    assert cycles == [["pkg.a", "pkg.b", "pkg.a"], ["pkg.sub", "pkg.sub.impl", "pkg.sub"]]
    assert describe(cycles[0], graph) == "pkg.a (line 1) -> pkg.b (line 2) -> pkg.a"
