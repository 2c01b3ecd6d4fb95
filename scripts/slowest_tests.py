#!/usr/bin/env python
"""The slowest tests of `make test`'s passes, from their JUnit reports, and each pass's sum.

    python scripts/slowest_tests.py [var/test-reports/sqlite-web.xml ... ]
                                    [--top 15] [--against OLD_DIR]

A test's time is what pytest's JUnit report gives it (setup + call + teardown). With
``--against`` (a folder holding an earlier round's reports of the same names) each row also
shows the earlier time and the growth, so a round's slowdown per test can be read.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

# make test's three processes: the SQLite pass's web lane beside the PostgreSQL pass, then its rest
DEFAULT_REPORTS = (
    "var/test-reports/sqlite-web.xml",
    "var/test-reports/postgres.xml",
    "var/test-reports/sqlite-rest.xml",
)


def test_times(report: Path) -> dict[str, float]:
    """``{test id: seconds}`` of a JUnit report (``classname::name``, as pytest writes them)."""
    times: dict[str, float] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        key = f"{case.get('classname', '')}::{case.get('name', '')}"
        times[key] = times.get(key, 0.0) + float(case.get("time") or 0.0)
    return times


def report_lines(report: Path, top: int, earlier: Path | None = None) -> list[str]:
    times = test_times(report)
    before = test_times(earlier) if earlier is not None and earlier.exists() else {}
    lines = [
        f"{report}: {len(times)} tests, {sum(times.values()):.0f} s in all (summed over processes)"
    ]
    for key, seconds in sorted(times.items(), key=lambda kv: -kv[1])[:top]:
        row = f"  {seconds:8.1f} s  {key}"
        if key in before:
            row += f"  (was {before[key]:.1f} s, {seconds - before[key]:+.1f})"
        elif before:
            row += "  (new)"
        lines.append(row)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="*", default=list(DEFAULT_REPORTS))
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--against", type=Path, help="a folder of an earlier round's reports")
    args = parser.parse_args(argv)
    missing = [r for r in args.reports if not Path(r).exists()]
    if missing:
        print(
            f"slowest_tests: no such report: {', '.join(missing)} (run make test first)",
            file=sys.stderr,
        )
        return 1
    for report in map(Path, args.reports):
        earlier = args.against / report.name if args.against else None
        print("\n".join(report_lines(report, args.top, earlier)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
