"""The tests are laid out like the code they test: a folder of ``tests/core`` per package of
``rft_core``, a folder of ``tests/webapp`` per app of ``webapp``; and a test module imports no
other test module (what tests share lives in a helper module or a conftest fixture)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
# folders of test data or fake packages, not tests of a package
NOT_A_MIRROR = {"fake_vllm", "trinity_configs", "broken_configs", "__pycache__"}


def _test_folders(tests: Path) -> list[Path]:
    return sorted(
        d
        for d in tests.iterdir()
        if d.is_dir() and d.name not in NOT_A_MIRROR and any(d.rglob("test_*.py"))
    )


def test_each_folder_of_tests_core_and_tests_webapp_is_a_package_of_the_code():
    orphans = [
        f"{folder.relative_to(ROOT)} (no {code}/{folder.name}/)"
        for tests, code in (("core", "rft_core"), ("webapp", "webapp"))
        for folder in _test_folders(TESTS / tests)
        if not (ROOT / code / folder.name / "__init__.py").is_file()
    ]
    assert not orphans, f"test folders that mirror no package: {orphans}"


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append((node.lineno, node.module))
    return names


def test_no_test_module_imports_another_test_module():
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in sorted(TESTS.rglob("*.py"))
        if "fake_vllm" not in path.parts
        for line, name in _imported_modules(ast.parse(path.read_text(), str(path)))
        if name.rsplit(".", 1)[-1].startswith("test_")
    ]
    assert not found, "share helpers through a helper module or a conftest fixture:\n" + "\n".join(
        found
    )
