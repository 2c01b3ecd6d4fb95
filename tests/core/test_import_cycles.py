"""The import graph stays layered: no import cycle between modules, between boxes (the packages
and loose modules under ``rft_core``, ``webapp``, ``workers``) or between those top packages,
``rft_core.config`` a leaf, webapp's apps importing each other one way, and ``workers`` reaching
``webapp`` only through its public modules. The graph is ``scripts/import_graph.py``'s (its doc
says what counts as an edge: imports inside functions count, ``if TYPE_CHECKING:`` ones do not);
a failure names each cycle (``a (line 3) -> b (line 9) -> a``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
ig = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ig)

# what rft_core.config may import besides itself: the contracts at rft_core's root
CONFIG_MAY_IMPORT = {"rft_core.errors", "rft_core.registry", "rft_core.dtypes"}
# the only webapp modules the worker processes may import: the Celery app, the supervisor's
# restart counts, and the action functions the ingestor writes a run's events through
WORKERS_MAY_IMPORT = {"webapp.celery", "webapp.health.supervisor", "webapp.ingest.actions"}


def test_rft_core_has_no_import_cycle():
    graph = ig.import_graph(ROOT, "rft_core")
    assert len(graph) > 50 and graph["rft_core.runtime.launcher"]  # the whole package was read
    cycles = [ig.describe(c, graph) for c in ig.find_cycles(graph)]
    assert not cycles, "import cycles in rft_core:\n" + "\n".join(cycles)


def test_rft_core_packages_import_each_other_in_one_direction():
    graph = ig.import_graph(ROOT, "rft_core")
    boxes = ig.collapse(graph, lambda m: ig.box_of(m, graph))
    assert "rft_core.trainer" in boxes and "rft_core.config" in boxes
    cycles = [" -> ".join(c) for c in ig.find_cycles(boxes)]
    assert not cycles, "cycles between rft_core's packages:\n" + "\n".join(cycles)


def test_config_is_a_leaf():
    graph = ig.import_graph(ROOT, "rft_core")
    outside = sorted(
        f"{m} (line {line}) -> {target}"
        for m, targets in graph.items()
        if m == "rft_core.config" or m.startswith("rft_core.config.")
        for target, line in targets.items()
        if not (target == "rft_core.config" or target.startswith("rft_core.config."))
        and target not in CONFIG_MAY_IMPORT
    )
    assert not outside, "rft_core.config imports other parts of rft_core:\n" + "\n".join(outside)


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
    graph = ig.import_graph(tmp_path, "pkg")
    assert graph["pkg.c"] == {} and graph["pkg.d"] == {"pkg.c": 1}
    cycles = ig.find_cycles(graph)
    assert cycles == [["pkg.a", "pkg.b", "pkg.a"], ["pkg.sub", "pkg.sub.impl", "pkg.sub"]]
    assert ig.describe(cycles[0], graph) == "pkg.a (line 1) -> pkg.b (line 2) -> pkg.a"


def test_boxes_collapse_modules_and_name_the_lighter_direction_as_pointing_back_up(tmp_path):
    files = {
        "top/__init__.py": "",
        "top/loose.py": "from top.pkg import inner\n",
        "top/pkg/__init__.py": "",
        "top/pkg/inner.py": "import top.other.x\n",
        "top/pkg/more.py": "import top.other.y\n",
        "top/other/__init__.py": "",
        "top/other/x.py": "",
        "top/other/y.py": "def f():\n    import top.pkg.inner\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = ig.import_graph(tmp_path, "top")
    assert (
        ig.box_of("top.pkg.inner", graph) == "top.pkg"
        and ig.box_of("top.loose", graph) == "top.loose"
    )
    boxes = ig.collapse(graph, lambda m: ig.box_of(m, graph))
    assert boxes["top.loose"] == {"top.pkg": 1}
    assert boxes["top.pkg"] == {"top.other": 2} and boxes["top.other"] == {"top.pkg": 1}
    assert ig.back_arrows(boxes) == [("top.other", "top.pkg", 1)]
    assert ig.find_cycles(boxes) == [["top.other", "top.pkg", "top.other"]]
    figures = ig.figures(graph)
    assert figures["boxes"]["nodes"] == 4 and figures["boxes"]["arrows"] == 3
    assert figures["modules"]["cycles"] == []  # y -> inner -> x: no module cycle


def test_webapp_never_imports_workers():
    graph = ig.import_graph(ROOT, ("rft_core", "webapp", "workers"))
    assert graph["workers.celery_app"]  # the three packages were read
    found = sorted(
        f"{m} (line {line}) -> {target}"
        for m, targets in graph.items()
        if m.split(".")[0] == "webapp"
        for target, line in targets.items()
        if target.split(".")[0] == "workers"
    )
    assert not found, (
        "webapp imports workers (workers -> webapp is the one direction):\n" + "\n".join(found)
    )
    tops = ig.collapse(graph, lambda m: m.split(".")[0])
    assert tops["rft_core"] == {}  # the engine imports neither web package
    assert not ig.find_cycles(tops)


def test_webapp_apps_import_each_other_in_one_direction():
    graph = ig.import_graph(ROOT, "webapp")
    boxes = ig.collapse(graph, lambda m: ig.box_of(m, graph))
    # the apps are read, and layered as docs/ARCHITECTURE.md draws them
    assert boxes["webapp.runs"]["webapp.experiments"] > 0
    assert boxes["webapp.checkpoints"]["webapp.runs"] > 0
    assert boxes["webapp.ingest"]["webapp.checkpoints"] > 0
    cycles = [" -> ".join(c) for c in ig.find_cycles(boxes)]
    back = [f"{a} -> {b} ({n})" for a, b, n in ig.back_arrows(boxes)]
    assert not cycles and not back, (
        "webapp's boxes import each other (find each arrow with scripts/import_graph.py):\n"
        + "\n".join(cycles + back)
    )


def test_workers_import_only_webapps_public_modules():
    graph = ig.import_graph(ROOT, ("webapp", "workers"))
    assert graph["workers.ingestor"]  # the ingestor was read
    found = sorted(
        f"{m} (line {line}) -> {target}"
        for m, targets in graph.items()
        if m.split(".")[0] == "workers"
        for target, line in targets.items()
        if target.split(".")[0] == "webapp" and target not in WORKERS_MAY_IMPORT
    )
    assert not found, (
        f"workers import webapp beyond {sorted(WORKERS_MAY_IMPORT)} (give the web side a "
        "public action function for it instead):\n" + "\n".join(found)
    )
    assert "webapp.ingest.actions" in graph["workers.ingestor"]


def test_the_pictures_in_docs_are_drawn_from_the_code_now():
    graph = ig.import_graph(ROOT)
    text = ig.DOCS.read_text()
    assert "<!-- import-graph:rft_core -->" in text
    assert text == ig.docs_text(text, graph), (
        "docs/ARCHITECTURE.md is stale: run `python scripts/import_graph.py --write-docs`"
    )
