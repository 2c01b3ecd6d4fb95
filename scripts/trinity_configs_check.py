"""Load every Trinity-RFT config under one or more directories as ``trinity run --dry-run`` does,
and print, per config, ``loads`` or ``refused`` with the one line that refuses it, then totals.

    PYTHONPATH=. .venv/bin/python scripts/trinity_configs_check.py DIR [DIR ...] [--quiet]

Each ``*.yaml`` below a DIR is one config (``docs/trinity_examples.md`` says how the project's
copies and Trinity's own ``examples/`` + ``benchmark/config/`` were measured). A YAML file with
none of Trinity's top-level sections (``model``, ``buffer``, ``algorithm``, ``mode``) is a
backend file (verl's ``train_*.yaml``), listed as ``skipped`` and not counted. An environment
variable a config reads with ``${oc.env:VAR}`` and no default is set to a placeholder path
when unset (a user sets it; model and data paths are checked when the run starts, not here).
A failure that is not a one-line refusal (a traceback) is counted as ``crashed``. Exit status 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from pathlib import Path

import yaml

TOP_LEVEL = {"model", "buffer", "algorithm", "mode"}
ENV_WITHOUT_DEFAULT = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)\}")


def check(path: Path) -> tuple[str, str]:
    """``(status, line)``: status ``loads`` / ``refused`` / ``crashed`` / ``skipped``."""
    from rft_core.config import check_registered_names, load_config
    from rft_core.errors import RFTError
    from rft_core.registries import registered_names_table

    text = path.read_text(errors="replace")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        return "refused", f"not valid YAML: {str(err).splitlines()[0]}"
    if not isinstance(data, dict) or not TOP_LEVEL & set(data):
        return "skipped", "not a Trinity-RFT config (no model/buffer/algorithm/mode section)"
    for var in ENV_WITHOUT_DEFAULT.findall(text):
        os.environ.setdefault(var, f"/placeholder/{var}")
    try:
        cfg = load_config(path)
        check_registered_names(cfg, registered_names_table())
    except RFTError as err:
        return "refused", str(err).splitlines()[0]
    except Exception as err:  # noqa: BLE001 - counted as a crash, the measurement goes on
        return "crashed", f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return "loads", ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="directories of Trinity configs")
    parser.add_argument("--quiet", action="store_true", help="print only the totals")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # the loader's warnings are not the measurement
    grand: dict[str, int] = {"loads": 0, "refused": 0, "crashed": 0}
    for root in args.dirs:
        counts: dict[str, int] = {"loads": 0, "refused": 0, "crashed": 0, "skipped": 0}
        for path in sorted(root.rglob("*.yaml")):
            status, line = check(path)
            counts[status] += 1
            if not args.quiet:
                rel = path.relative_to(root)
                print(f"{rel}: {status}" + (f": {line}" if line else ""))
        n = counts["loads"] + counts["refused"] + counts["crashed"]
        for key in grand:
            grand[key] += counts[key]
        print(
            f"== {root}: {counts['loads']} of {n} load ({_pct(counts['loads'], n)}), "
            f"{counts['refused']} refused, {counts['crashed']} crashed, "
            f"{counts['skipped']} skipped (not Trinity configs)"
        )
    if len(args.dirs) > 1:
        n = sum(grand.values())
        print(
            f"== total: {grand['loads']} of {n} load ({_pct(grand['loads'], n)}), "
            f"{grand['refused']} refused, {grand['crashed']} crashed"
        )
    return 0


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "n/a"


if __name__ == "__main__":
    sys.exit(main())
