"""A run's metrics as files: ``/runs/<id>/metrics.csv`` and ``/runs/<id>/metrics.json``.

Every series the run reported (every ``MetricPoint``), each point with its step, stage, wall
time (unix seconds, as the run emitted it) and value (empty / null for NaN or inf), series by
series (name, then the order the points came in: the ``metric_run_name_seq`` index, so the
database streams them without sorting). Both are streamed: rows are read CHUNK at a time with a
server-side cursor where the database has one, and written out as they come, so a run of a
million points costs neither the memory nor the wait of building the file first.

The CSV is written by hand rather than through ``csv.writer``: the columns are numbers and a
few short names, and a field is quoted (RFC 4180) only when it holds a comma, a quote or a line
break, which keeps the stream above 50 MB/s (``benchmarks/web_pages.py``). Owner and staff
only: another user's run is a 404 (``authorize_hidden``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from django.http import HttpRequest, StreamingHttpResponse
from django.views.decorators.http import require_GET

from webapp.accounts.access import authorize_hidden
from webapp.audit.record import Actor
from webapp.runs.models import MetricPoint, Run

CHUNK = 5000  # rows per fetch, and per piece of the response
CSV_COLUMNS = ("name", "role", "stage", "step", "wall_time", "value")
JSON_COLUMNS = ("step", "stage", "wall_time", "value")


def metric_rows(run: Run) -> Iterator[tuple]:
    """``(name, role, stage, step, wall_time, value)`` of every point, series by series."""
    points = MetricPoint.objects.filter(run=run).order_by("name", "id")
    return points.values_list(*CSV_COLUMNS).iterator(chunk_size=CHUNK)


def csv_field(text: str) -> str:
    if any(c in text for c in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


def _number(value) -> str:
    return "" if value is None else repr(value)


def csv_chunks(rows: Iterator[tuple]) -> Iterator[str]:
    """The CSV text of ``rows``: a header, then pieces of CHUNK lines."""
    yield ",".join(CSV_COLUMNS) + "\n"
    quoted: dict[str, str] = {}  # names, roles and stages repeat on every line
    lines: list[str] = []
    for name, role, stage, step, wall_time, value in rows:
        if (q_name := quoted.get(name)) is None:
            q_name = quoted[name] = csv_field(name)
        if (q_role := quoted.get(role)) is None:
            q_role = quoted[role] = csv_field(role)
        if (q_stage := quoted.get(stage)) is None:
            q_stage = quoted[stage] = csv_field(stage)
        lines.append(
            f"{q_name},{q_role},{q_stage},{'' if step is None else step},"
            f"{wall_time!r},{_number(value)}\n"
        )
        if len(lines) == CHUNK:
            yield "".join(lines)
            lines = []
    if lines:
        yield "".join(lines)


def json_chunks(run: Run, rows: Iterator[tuple]) -> Iterator[str]:
    """``{"run": {...}, "columns": [...], "series": [{"name", "role", "points": [[step,
    stage, wall_time, value], ...]}, ...]}``, one series per (name, role) in order."""
    head = {"id": run.pk, "experiment": run.experiment.name, "number": run.number}
    yield f'{{"run": {json.dumps(head)}, "columns": {json.dumps(JSON_COLUMNS)}, "series": ['
    current = None
    parts: list[str] = []
    first_point = True
    for name, role, stage, step, wall_time, value in rows:
        if (name, role) != current:
            opening = "" if current is None else "]}, "
            series = json.dumps(name), json.dumps(role)
            parts.append(f'{opening}{{"name": {series[0]}, "role": {series[1]}, "points": [')
            current, first_point = (name, role), True
        point = (
            f"[{'null' if step is None else step}, {json.dumps(stage)}, {wall_time!r}, "
            f"{'null' if value is None else repr(value)}]"
        )
        parts.append(point if first_point else ", " + point)
        first_point = False
        if len(parts) >= CHUNK:
            yield "".join(parts)
            parts = []
    parts.append("]}]}" if current is not None else "]}")
    yield "".join(parts)


def _download(body: Iterator[str], content_type: str, filename: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse((piece.encode() for piece in body), content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_GET
def metrics_csv(request: HttpRequest, pk: int) -> StreamingHttpResponse:
    run = authorize_hidden(Actor.from_request(request), Run, pk, "run.download")
    return _download(
        csv_chunks(metric_rows(run)), "text/csv; charset=utf-8", f"run-{run.pk}-metrics.csv"
    )


@require_GET
def metrics_json(request: HttpRequest, pk: int) -> StreamingHttpResponse:
    run = authorize_hidden(Actor.from_request(request), Run, pk, "run.download")
    return _download(
        json_chunks(run, metric_rows(run)), "application/json", f"run-{run.pk}-metrics.json"
    )
