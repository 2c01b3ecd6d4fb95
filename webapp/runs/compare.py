"""The config differences of a few runs (``/runs/compare/?ids=1,2``): each run's config
snapshot flattened to ``{yaml path: value}`` (``buffer.explorer_input.eval_tasksets[0].name``),
and the paths whose values are not all equal. A path a run does not set shows as absent (the
schema's default applies there).

The snapshot is read from ``Run.config_yaml`` (canonical YAML, in the schema's order) rather
than ``Run.config``: PostgreSQL's jsonb does not keep the order of keys.

Also the metric series the compare page overlays (``/runs/compare/data.json?ids=1,2&names=a,b``,
``compare_series``): per run per metric the ``step``/``wall_time``/``value``/``stage`` arrays in
the shape of the run page's snapshot (``live.json``'s ``metrics``), bounded: 2 to ``MAX_RUNS``
runs, at most ``MAX_NAMES`` metrics a request, at most ``MAX_POINTS`` points a series (evenly
thinned beyond, first and last kept, the series marked ``downsampled``). Without ``names`` the
reward/accuracy group is chosen (names with ``reward`` or ``accuracy`` in them)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from webapp.errors import ActionError
from webapp.experiments.config_policy import parse_yaml
from webapp.runs.models import MetricPoint, Run

MAX_RUNS = 20
MAX_NAMES = 40
MAX_NAME_CHARS = 200
MAX_POINTS = 10_000
DEFAULT_GROUP = re.compile(r"reward|accuracy", re.IGNORECASE)
DEFAULT_FALLBACK = 4  # metrics shown when a run reports no reward/accuracy metric
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


def config_flats(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Each run's config snapshot flattened to ``{yaml path: value}``."""
    return [
        flatten(parse_yaml(run.config_yaml, what=f"run {run.pk}'s config") or {}) for run in runs
    ]


def config_differences(flats: list[dict[str, Any]]) -> list[Difference]:
    """The paths whose values differ between the runs of ``config_flats``."""
    paths = list(dict.fromkeys(path for flat in flats for path in flat))  # schema order
    rows = []
    for path in paths:
        values = [flat.get(path, ABSENT) for flat in flats]
        if all(v == values[0] and type(v) is type(values[0]) for v in values):
            continue
        rows.append(Difference(path, [_show(v) for v in values], [v is ABSENT for v in values]))
    return rows


# ---------------------------------------------------------------- metric series


def parse_names(text: str | None) -> list[str] | None:
    """``"a,b"`` -> ["a", "b"] (order kept, repeats dropped); None when not given (the default
    group applies); 400 past ``MAX_NAMES`` or for a name longer than a metric name can be."""
    if text is None or not text.strip():
        return None
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if len(names) > MAX_NAMES:
        raise ActionError(
            f"names: at most {MAX_NAMES} metrics a request (got {len(names)})",
            errors={"names": f"at most {MAX_NAMES}"},
        )
    for name in names:
        if len(name) > MAX_NAME_CHARS:
            raise ActionError(
                f"names: {name[:40]!r}... is longer than {MAX_NAME_CHARS} characters",
                errors={"names": f"a name is over {MAX_NAME_CHARS} characters"},
            )
    return names


def default_names(names: Sequence[str]) -> list[str]:
    group = [n for n in names if DEFAULT_GROUP.search(n)]
    return (group or list(names)[:DEFAULT_FALLBACK])[:MAX_NAMES]


def _thin(length: int) -> list[int] | None:
    """Indices of at most ``MAX_POINTS`` evenly spread points (first and last kept); None: all."""
    limit = MAX_POINTS
    if length <= limit:
        return None
    return sorted({round(i * (length - 1) / (limit - 1)) for i in range(limit)})


def compare_series(runs: Sequence[Run], names: list[str] | None) -> dict[str, Any]:
    """The JSON body of ``/runs/compare/data.json`` for runs the caller may see (checked by the
    view, one ``authorize`` per id)."""
    run_ids = [run.pk for run in runs]
    available = sorted(
        set(
            MetricPoint.objects.filter(run_id__in=run_ids)
            .values_list("name", flat=True)
            .distinct()
            .order_by()
        )
    )
    chosen = default_names(available) if names is None else names
    series: dict[int, dict[str, dict[str, list]]] = {pk: {} for pk in run_ids}
    rows = (
        MetricPoint.objects.filter(run_id__in=run_ids, name__in=chosen)
        .order_by("run_id", "name", "id")
        .values_list("run_id", "name", "step", "wall_time", "value", "stage")
    )
    for run_id, name, step, wall_time, value, stage in rows.iterator(chunk_size=5000):
        arrays = series[run_id].get(name)
        if arrays is None:
            arrays = series[run_id][name] = {"step": [], "wall_time": [], "value": [], "stage": []}
        arrays["step"].append(step)
        arrays["wall_time"].append(wall_time)
        arrays["value"].append(value)
        arrays["stage"].append(stage)
    _branch_from_parents(runs, series)
    for metrics in series.values():
        for arrays in metrics.values():
            keep = _thin(len(arrays["value"]))
            arrays["downsampled"] = keep is not None
            if keep is not None:
                for key in ("step", "wall_time", "value", "stage"):
                    arrays[key] = [arrays[key][i] for i in keep]
    return {
        "names": available,
        "selected": chosen,
        "max_points": MAX_POINTS,
        "runs": [
            {
                "id": run.pk,
                "number": run.number,
                "experiment_id": run.experiment_id,
                "experiment": run.experiment.name,
                "label": f"{run.experiment.name} #{run.number}",
                "status": run.status,
                "url": run.get_absolute_url(),
                "metrics": {n: series[run.pk][n] for n in chosen if n in series[run.pk]},
                "fork": _fork_of(run),
            }
            for run in runs
        ],
    }


def _fork_of(run: Run) -> dict[str, Any] | None:
    if run.parent_id is None:
        return None
    return {"parent": run.parent_id, "stage": run.fork_stage, "step": run.fork_step}


def _branch_from_parents(
    runs: Sequence[Run], series: dict[int, dict[str, dict[str, list]]]
) -> None:
    """A fork compared with its parent: each of its series starts at the parent's point of the
    fork step (same stage), so the overlay shows where it branched off (W&B's fork view). The
    borrowed point has no wall time (the fork did not log it)."""
    for run in runs:
        parent = series.get(run.parent_id) if run.parent_id is not None else None
        if parent is None or run.fork_step is None:
            continue
        for name, arrays in series[run.pk].items():
            theirs = parent.get(name)
            if theirs is None:
                continue
            at = [
                i
                for i, (step, stage) in enumerate(zip(theirs["step"], theirs["stage"], strict=True))
                if step == run.fork_step and stage == run.fork_stage
            ]
            if at:
                arrays["step"].insert(0, run.fork_step)
                arrays["wall_time"].insert(0, None)
                arrays["value"].insert(0, theirs["value"][at[-1]])
                arrays["stage"].insert(0, run.fork_stage)
