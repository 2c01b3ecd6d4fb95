"""``scripts/slowest_tests.py``: the slowest tests of a JUnit report, with growth against an
earlier round, on reports written by a real pytest run of two tiny test files."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("slowest", ROOT / "scripts" / "slowest_tests.py")
slowest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(slowest)

TESTS = """
import time

def test_slow():
    time.sleep({slow})

def test_quick():
    pass
"""


def _junit(tmp_path: Path, name: str, slow: float) -> Path:
    """A real pytest run's JUnit report: test_slow sleeps ``slow`` s (sleeps are only ever
    longer than asked, so the ordering below holds on any machine)."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "test_t.py").write_text(TESTS.format(slow=slow))
    report = folder / "sqlite.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "/dev/null",
         f"--junitxml={report}", str(folder / "test_t.py")],
        cwd=folder, check=True, capture_output=True,
    )  # fmt: skip
    return report


def test_it_lists_the_slowest_first_with_the_growth_since_an_earlier_round(tmp_path):
    old = _junit(tmp_path, "old", 0.0)
    new = _junit(tmp_path, "new", 0.3)
    times = slowest.test_times(new)
    assert set(times) == {"test_t::test_slow", "test_t::test_quick"}
    assert times["test_t::test_slow"] >= 0.3

    lines = slowest.report_lines(new, top=1, earlier=old)
    assert lines[0].startswith(f"{new}: 2 tests, ")
    assert len(lines) == 2  # --top 1: only the slowest
    assert lines[1].split()[2] == "test_t::test_slow"
    was, growth = re.search(r"\(was ([\d.]+) s, \+([\d.]+)\)", lines[1]).groups()
    assert float(was) < 0.3 <= float(was) + float(growth) + 0.05  # rounded to 0.1 s


def test_a_missing_report_is_one_line_and_exit_1(tmp_path, capsys):
    assert slowest.main([str(tmp_path / "nope.xml")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"slowest_tests: no such report: {tmp_path / 'nope.xml'} (run make test first)"]
