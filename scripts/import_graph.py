"""The import graph of the product's code (``rft_core``, ``webapp``, ``workers``), built from the
source with ``ast``: its figures, its cycles, and a picture of which box imports which.

    python scripts/import_graph.py                 # figures and cycles, per level
    python scripts/import_graph.py --mermaid       # the package picture (docs/ARCHITECTURE.md)
    python scripts/import_graph.py --json          # the same figures, machine-readable
    python scripts/import_graph.py --write-docs    # redraws the pictures in docs/ARCHITECTURE.md

What counts as an edge ``a -> b``: an ``import`` / ``from ... import`` statement in module ``a``
that names module ``b`` of the scanned packages, at module level AND inside functions or classes
(a deferred import still makes ``a`` depend on ``b``), relative imports resolved. ``from p import
x`` is an edge to ``p.x`` when that is a module, else to ``p``; ``import p.q`` one to ``p.q``. Not
counted: imports under ``if TYPE_CHECKING:`` (never run), and the implicit import of a package's
``__init__`` when one of its submodules is imported (Python runs it, but the importer does not
name it).

Levels: *modules*; *boxes*, where a box is a package directly under a top package
(``rft_core.trainer``, ``webapp.runs``) or a loose module at a top package's root
(``rft_core.runtime.launcher``), or a top package with no subpackages (``workers``); *tops* (``rft_core``,
``webapp``, ``workers``). An arrow between boxes stands for every module edge between them.
Where two boxes import each other, the direction with fewer module arrows (ties: the
later name) is counted as *pointing back up*: the layering would be clean without it.

``tests/core/test_import_cycles.py`` asserts on these figures, and fails when the pictures in
``docs/ARCHITECTURE.md`` (between its ``<!-- import-graph:TOP -->`` markers) are not what
``--write-docs`` draws from the code now.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rft_core", "webapp", "workers")
SKIPPED_DIRS = {"migrations", "__pycache__"}

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
    """The first candidate that is a scanned module, else the longest module prefix of the last
    one (``import p.q`` where ``q`` is no module: ``p``), else None (not ours)."""
    for name in candidates:
        if name in modules:
            return name
    name = candidates[-1]
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _sources(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if SKIPPED_DIRS.isdisjoint(path.relative_to(root).parts):
                found[_module_name(path, root)] = path
    return found


def import_graph(root: Path = ROOT, packages: tuple[str, ...] | str = PACKAGES) -> Graph:
    """The module import graph of ``packages`` (directories under ``root``), as the module doc
    says; migrations are left out (Django's generated files)."""
    if isinstance(packages, str):
        packages = (packages,)
    modules = _sources(root, packages)
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


def box_of(module: str, graph: Graph) -> str:
    """The box of a module: ``top.sub`` for a package or loose module under a top package that
    has subpackages, the top itself otherwise (see the module doc)."""
    parts = module.split(".")
    top = parts[0]
    nested = any(m.startswith(top + ".") and m.count(".") >= 2 for m in graph)
    return ".".join(parts[:2]) if nested and len(parts) > 1 else top


def collapse(graph: Graph, key) -> dict[str, dict[str, int]]:
    """The graph of ``key(module)`` groups: group -> {group: number of module edges}."""
    groups: dict[str, dict[str, int]] = {}
    for a, targets in graph.items():
        ga = key(a)
        groups.setdefault(ga, {})
        for b in targets:
            gb = key(b)
            if gb != ga:
                groups[ga][gb] = groups[ga].get(gb, 0) + 1
    return {g: dict(sorted(t.items())) for g, t in sorted(groups.items())}


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle ``[a, b, ..., a]`` for each strongly connected set of two or more nodes."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm; the graphs are far below the recursion limit
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = {stack.pop()}
            while v not in component:
                component.add(stack.pop())
            on_stack.difference_update(component)
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted(_shortest_cycle(min(c), c, graph) for c in components)


def _shortest_cycle(start: str, members: set[str], graph: dict[str, dict[str, int]]) -> list[str]:
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
    """``a (line 3) -> b (line 9) -> a`` for a module cycle."""
    arrows = [f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False)]
    return " -> ".join([*arrows, cycle[-1]])


def back_arrows(groups: dict[str, dict[str, int]]) -> list[tuple[str, str, int]]:
    """For each pair of groups importing each other, the lighter direction (module doc)."""
    found = []
    for a, targets in groups.items():
        for b, n in targets.items():
            m = groups.get(b, {}).get(a)
            if m is not None and (n < m or (n == m and a > b)):
                found.append((a, b, n))
    return sorted(found)


def figures(graph: Graph) -> dict:
    """The figures of every level (the module doc), as printed by the command."""
    boxes = collapse(graph, lambda m: box_of(m, graph))
    tops = collapse(graph, lambda m: m.split(".")[0])
    level = {}
    for name, g in (("modules", graph), ("boxes", boxes), ("tops", tops)):
        arrows = sum(len(t) for t in g.values())
        cycles = find_cycles(g)
        level[name] = {
            "nodes": len(g),
            "arrows": arrows,
            "arrows_back_up": [f"{a} -> {b} ({n})" for a, b, n in back_arrows(g)]
            if name != "modules"
            else [],
            "cycles": [describe(c, graph) if name == "modules" else " -> ".join(c) for c in cycles],
        }
    return level


def mermaid(graph: Graph, top: str | None = None) -> str:
    """The box picture as a Mermaid flowchart. With ``top``: that package's boxes, and each
    other top package as one node (so ``webapp``'s picture shows what it takes from
    ``rft_core``, and ``workers``'s what it takes from ``webapp``)."""

    def key(module: str) -> str:
        if top is None or module.split(".")[0] == top:
            return box_of(module, graph)
        return module.split(".")[0]

    boxes = collapse(graph, key)
    back = {(a, b) for a, b, _ in back_arrows(boxes)}
    ident = {name: name.replace(".", "_") for name in boxes}
    lines = ["flowchart LR"]
    for name in boxes:
        if top is None or name.split(".")[0] == top:
            lines.append(f'    {ident[name]}["{name}"]')
    targets_here = {b for a, t in boxes.items() if top is None or a.split(".")[0] == top for b in t}
    for name in boxes:
        if top is not None and name.split(".")[0] != top and name in targets_here:
            lines.append(f'    {ident[name]}[("{name}")]')  # another top package, drawn whole
    for a, targets in boxes.items():
        if top is not None and a.split(".")[0] != top:
            continue  # only what this package imports
        for b in targets:
            arrow = "-.->|back up|" if (a, b) in back else "-->"
            lines.append(f"    {ident[a]} {arrow} {ident[b]}")
    return "\n".join(lines) + "\n"


DOCS = ROOT / "docs" / "ARCHITECTURE.md"


def docs_text(text: str, graph: Graph) -> str:
    """``text`` (docs/ARCHITECTURE.md) with each ``<!-- import-graph:TOP -->`` ...
    ``<!-- /import-graph:TOP -->`` block redrawn: TOP's boxes as a Mermaid chart."""
    for top in PACKAGES:
        start, end = f"<!-- import-graph:{top} -->", f"<!-- /import-graph:{top} -->"
        if start not in text:
            continue
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{start}\n```mermaid\n{mermaid(graph, top)}```\n{end}{tail}"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--mermaid", action="store_true", help="print the box picture (Mermaid)")
    parser.add_argument("--top", choices=PACKAGES, help="with --mermaid: one top package's boxes")
    parser.add_argument("--write-docs", action="store_true", help=f"redraw the pictures in {DOCS}")
    args = parser.parse_args(argv)
    graph = import_graph()
    if args.write_docs:
        DOCS.write_text(docs_text(DOCS.read_text(), graph))
        print(f"wrote {DOCS}")
        return 0
    if args.mermaid:
        sys.stdout.write(mermaid(graph, args.top))
        return 0
    level = figures(graph)
    if args.json:
        print(json.dumps(level, indent=2))
        return 0
    for name, f in level.items():
        print(
            f"{name}: {f['nodes']} nodes, {f['arrows']} arrows, "
            f"{len(f['arrows_back_up'])} pointing back up, {len(f['cycles'])} cycles"
        )
        for line in f["arrows_back_up"]:
            print(f"  back up: {line}")
        for line in f["cycles"]:
            print(f"  cycle: {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
