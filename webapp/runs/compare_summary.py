"""The compare page's summary (``/runs/compare/?ids=1,2``): one row per run with its status,
steps (the last step of each stage: an SFT stage's 450 is not a GRPO stage's 40), duration and, per key metric, the last value and the best, the best run of each metric
marked; and the data of a parallel-coordinates chart (one line per run across the numeric config
paths that differ and the key metrics' last values), as W&B's run table and parallel-coordinates
panel show a sweep.

Key metrics: the compare charts' default group (names with ``reward`` or ``accuracy``,
``compare.default_names``), at most :data:`MAX_COLUMNS`. Best: the highest value, or the lowest
for a metric whose name says it is a loss, KL, entropy or length (:func:`lower_is_better`); a
NaN/inf point (stored as null) counts for neither. Two queries for any number of runs and points:
one aggregate per (run, metric), one for the last points' values.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Max, Min

from webapp.runs.compare import ABSENT, default_names
from webapp.runs.models import MetricPoint, Run
from webapp.runs.table import duration_text, run_duration

MAX_COLUMNS = 8
LOWER_IS_BETTER = re.compile(r"loss|kl|entropy|length|time", re.IGNORECASE)


def lower_is_better(name: str) -> bool:
    return bool(LOWER_IS_BETTER.search(name))


@dataclass
class Cell:
    last: float | None = None
    best: float | None = None
    is_best: bool = False  # this run holds the column's best value


@dataclass
class SummaryRow:
    run: Run
    stage_steps: list[tuple[str, int]]  # (stage, its last step) in the run's order; "" no stage
    duration: str
    cells: list[Cell] = field(default_factory=list)


@dataclass
class Column:
    name: str
    lower_better: bool

    @property
    def parts(self) -> list[str]:
        """The name's ``/``-separated parts: the header may wrap after each ``/``."""
        return self.name.split("/")


@dataclass
class Summary:
    columns: list[Column]
    rows: list[SummaryRow]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]


def summary(runs: Sequence[Run]) -> Summary:
    run_ids = [run.pk for run in runs]
    aggregates = (
        MetricPoint.objects.filter(run_id__in=run_ids)
        .values("run_id", "name", "stage")
        .annotate(
            high=Max("value"),
            low=Min("value"),
            last_id=Max("id"),
            first_id=Min("id"),
            steps=Max("step"),
        )
        .order_by()
    )
    per_run: dict[int, dict[str, dict[str, Any]]] = {pk: {} for pk in run_ids}
    # per run, per stage: (its first point's id, its last step), for the "Steps" column
    stage_steps: dict[int, dict[str, tuple[int, int]]] = {pk: {} for pk in run_ids}
    for row in aggregates:
        _merge(per_run[row["run_id"]], row)
        if row["steps"] is not None:
            first, steps = stage_steps[row["run_id"]].get(row["stage"], (row["first_id"], 0))
            stage_steps[row["run_id"]][row["stage"]] = (
                min(first, row["first_id"]),
                max(steps, row["steps"]),
            )
    names = default_names(sorted({n for metrics in per_run.values() for n in metrics}))
    names = names[:MAX_COLUMNS]
    last_ids = [per_run[pk][n]["last_id"] for pk in run_ids for n in names if n in per_run[pk]]
    last_values = dict(MetricPoint.objects.filter(id__in=last_ids).values_list("id", "value"))
    rows = []
    for run in runs:
        metrics = per_run[run.pk]
        cells = []
        for name in names:
            m = metrics.get(name)
            if m is None:
                cells.append(Cell())
                continue
            best = m["low"] if lower_is_better(name) else m["high"]
            cells.append(Cell(last=last_values.get(m["last_id"]), best=best))
        stages = sorted(stage_steps[run.pk].items(), key=lambda item: item[1][0])
        steps = [(stage, last) for stage, (_, last) in stages]
        rows.append(SummaryRow(run, steps, duration_text(run_duration(run)), cells))
    columns = [Column(n, lower_is_better(n)) for n in names]
    for column, low in enumerate(c.lower_better for c in columns):
        values = [row.cells[column].best for row in rows if row.cells[column].best is not None]
        if len(values) < 2:
            continue
        target = min(values) if low else max(values)
        for row in rows:
            row.cells[column].is_best = row.cells[column].best == target
    return Summary(columns, rows)


def _merge(metrics: dict[str, dict[str, Any]], row: dict[str, Any]) -> None:
    """One stage's aggregate of a metric folded into the run's (every stage's) aggregate."""
    seen = metrics.get(row["name"])
    if seen is None:
        metrics[row["name"]] = dict(row)
        return
    for key, pick in (("high", max), ("low", min), ("last_id", max)):
        values = [v for v in (seen[key], row[key]) if v is not None]
        seen[key] = pick(values) if values else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is ABSENT:
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def parallel_coordinates(runs: Sequence[Run], table: Summary, flats: list[dict[str, Any]]) -> dict:
    """``{"runs": [label...], "dimensions": [{"label", "values"}]}``: each numeric config path
    whose values differ between the runs (every run's value a number, or unset where the
    schema's default applies: such a run is left out of that axis as null), then each key
    metric's last value. Empty ``dimensions`` when there is nothing to draw."""
    dimensions = []
    paths = list(dict.fromkeys(p for flat in flats for p in flat))
    for path in paths:
        raw = [flat.get(path, ABSENT) for flat in flats]
        values = [_number(v) for v in raw]
        numeric = all(v is not None or r is ABSENT for v, r in zip(values, raw, strict=True))
        present = [v for v in values if v is not None]
        if numeric and len(set(present)) > 1:
            dimensions.append({"label": path, "values": values})
    for column, name in enumerate(table.names):
        values = [row.cells[column].last for row in table.rows]
        if any(v is not None for v in values):
            dimensions.append({"label": name, "values": values})
    labels = [f"{run.experiment.name} #{run.number}" for run in runs]
    return {"runs": labels, "dimensions": dimensions if len(dimensions) >= 2 else []}
