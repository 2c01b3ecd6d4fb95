"""make test's lanes (``RFT_TEST_LANE``), applied by tests/conftest.py.

"web" is the webapp and workers tests that use a test database -- mostly one Python process of
Django requests, the same tests as the PostgreSQL pass, so make test runs the two side by side,
one core each; "rest" is every other test (Ray clusters, training runs, browsers, whole
stacks), which make test runs after them on both cores. Unset (or "all"): every test. Together
the two lanes are the whole suite, once.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

LANES = ("web", "rest", "all")
WEB_LANE_DIRS = ("webapp", "workers")
TESTS_DIR = Path(__file__).resolve().parent


def lane_of(item: pytest.Item) -> str:
    """The lane of a collected test: "web" or "rest"."""
    try:
        top = Path(str(item.path)).resolve().relative_to(TESTS_DIR).parts[0]
    except ValueError:  # collected from outside tests/ (a path given on the command line)
        return "rest"
    if top in WEB_LANE_DIRS and item.get_closest_marker("no_test_database") is None:
        return "web"
    return "rest"


def selected_lane() -> str:
    """``RFT_TEST_LANE`` (default "all"); a lane that does not exist is a usage error."""
    lane = os.environ.get("RFT_TEST_LANE", "all") or "all"
    if lane not in LANES:
        raise pytest.UsageError(f"RFT_TEST_LANE={lane!r}: expected one of {', '.join(LANES)}")
    return lane


def select_lane(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the selected lane's tests in ``items``; the others are reported deselected."""
    lane = selected_lane()
    if lane == "all":
        return
    kept, dropped = [], []
    for item in items:
        (kept if lane_of(item) == lane else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
