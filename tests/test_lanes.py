"""make test's lanes (tests/lanes.py, ``RFT_TEST_LANE``): the web lane is exactly what the
PostgreSQL pass runs (webapp and workers tests without ``no_test_database``), the rest lane is
every other test, so the two together are the whole suite once; a lane that does not exist is
refused by name before anything is collected."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from lanes import TESTS_DIR, lane_of

ROOT = Path(__file__).resolve().parents[1]
# one file of each kind: a web/worker test on the test database, a whole stack of its own
# (no_test_database), a test outside webapp/ and workers/
FILES = (
    "tests/workers/test_channel_layer.py",
    "tests/workers/test_ray_head.py",
    "tests/test_slowest_tests.py",
)


class _Item:
    """What lane_of reads of a collected test: its path and its marks."""

    def __init__(self, path: Path, *marks: str) -> None:
        self.path, self.marks = path, set(marks)

    def get_closest_marker(self, name: str):
        return name if name in self.marks else None


@pytest.mark.parametrize(
    ("where", "marks", "lane"),
    [
        ("webapp/runs/test_x.py", (), "web"),
        ("workers/test_x.py", (), "web"),
        ("webapp/runs/test_x.py", ("browser",), "web"),  # the PostgreSQL pass runs it too
        ("workers/test_x.py", ("no_test_database",), "rest"),
        ("webapp/test_x.py", ("no_test_database",), "rest"),
        ("core/runtime/test_x.py", (), "rest"),
        ("e2e/test_x.py", (), "rest"),
        ("test_x.py", (), "rest"),
    ],
)
def test_the_lane_of_a_test_is_the_postgresql_pass_selection(where, marks, lane):
    assert lane_of(_Item(TESTS_DIR / where, *marks)) == lane


def test_a_test_outside_the_tests_folder_is_in_the_rest_lane(tmp_path):
    assert lane_of(_Item(tmp_path / "workers" / "test_x.py")) == "rest"


def _collect(lane: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RFT_TEST_LANE"}
    if lane is not None:
        env["RFT_TEST_LANE"] = lane
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *FILES],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _ids(proc: subprocess.CompletedProcess) -> set[str]:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return {line for line in proc.stdout.splitlines() if "::" in line}


def test_a_real_session_keeps_only_its_lane_and_the_lanes_make_the_whole():
    every = _ids(_collect(None))
    web, rest = _ids(_collect("web")), _ids(_collect("rest"))
    assert {i.split("::")[0] for i in web} == {FILES[0]}
    assert {i.split("::")[0] for i in rest} == {FILES[1], FILES[2]}
    assert web | rest == every and not web & rest


def test_an_unknown_lane_is_refused_by_name():
    proc = _collect("fast")
    assert proc.returncode == 4  # pytest's usage error
    assert "RFT_TEST_LANE='fast': expected one of web, rest, all" in proc.stdout + proc.stderr
