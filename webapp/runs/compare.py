"""The config differences of a few runs (``/runs/compare/?ids=1,2``): each run's config
snapshot flattened to ``{yaml path: value}`` (``buffer.explorer_input.eval_tasksets[0].name``),
and the paths whose values are not all equal. A path a run does not set shows as absent (the
schema's default applies there).

The snapshot is read from ``Run.config_yaml`` (canonical YAML, in the schema's order) rather
than ``Run.config``: PostgreSQL's jsonb does not keep the order of keys."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from webapp.errors import ActionError
from webapp.experiments.config_policy import parse_yaml
from webapp.runs.models import Run

MAX_RUNS = 12
ABSENT = object()


def parse_ids(text: str) -> list[int]:
    """``"3,5,8"`` -> [3, 5, 8] (order kept, repeats dropped); 400 for anything else."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ActionError(
            "ids: give the runs to compare, e.g. /runs/compare/?ids=1,2", errors={"ids": "missing"}
        )
    ids: list[int] = []
    for part in parts:
        if not part.isdigit() or int(part) < 1:
            raise ActionError(
                f"ids: {part!r} is not a run id (positive whole numbers separated by commas)",
                errors={"ids": f"{part!r} is not a run id"},
            )
        if int(part) not in ids:
            ids.append(int(part))
    if len(ids) < 2 or len(ids) > MAX_RUNS:
        raise ActionError(
            f"ids: compare 2 to {MAX_RUNS} different runs (got {len(ids)})",
            errors={"ids": f"2 to {MAX_RUNS} runs"},
        )
    return ids


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of a YAML mapping by path; an empty mapping or list is a leaf of its own."""
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(node, list) and node:
        out = {}
        for i, value in enumerate(node):
            out.update(flatten(value, f"{prefix}[{i}]"))
        return out
    return {prefix: node}


@dataclass(frozen=True)
class Difference:
    path: str
    values: list[str]  # one per run, in the runs' order; "" where the run does not set it
    absent: list[bool]


def _show(value: Any) -> str:
    if value is ABSENT:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def config_differences(runs: Sequence[Run]) -> list[Difference]:
    flats = [
        flatten(parse_yaml(run.config_yaml, what=f"run {run.pk}'s config") or {}) for run in runs
    ]
    paths = list(dict.fromkeys(path for flat in flats for path in flat))  # schema order
    rows = []
    for path in paths:
        values = [flat.get(path, ABSENT) for flat in flats]
        if all(v == values[0] and type(v) is type(values[0]) for v in values):
            continue
        rows.append(Difference(path, [_show(v) for v in values], [v is ABSENT for v in values]))
    return rows
