"""A run's metrics as files: ``/runs/<id>/metrics.csv`` and ``/runs/<id>/metrics.json``.

Every series the run reported (every ``MetricPoint``), each point with its step, stage, wall
time (unix seconds, as the run emitted it; the CSV also as ISO 8601 UTC, ``wall_time_iso``)
and value (empty / null for NaN or inf), series by
series (name, then the order the points came in: the ``metric_run_name_seq`` index, so the
database streams them without sorting). Both are streamed: points are read a chunk at a time
and written out as they come, so a run of a million points costs neither the memory nor the
wait of building the file first.

On PostgreSQL the server writes the CSV itself (``COPY ... TO STDOUT WITH (FORMAT csv)``,
streamed through libpq as it comes): no row passes through Python. Elsewhere (SQLite), and for
the JSON on both, the text is written here from the points as columns (``metric_reads``), a
column at a time with pyarrow compute (``metric_text``: floats exactly as ``repr`` writes
them): a series' "name,role,stage" prefix once per series, a field quoted (RFC 4180) only when
it holds a comma, a quote or a line break. Both CSVs give the same columns and values (a float
in its shortest exact form; PostgreSQL writes an integral float without ``.0``).
``benchmarks/web_pages.py`` measures the rate. Owner and staff only: another user's run is a
404 (``authorize_hidden``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from django.db import connection
from django.http import HttpRequest, StreamingHttpResponse
from django.views.decorators.http import require_GET

from webapp.accounts.access import authorize_hidden
from webapp.audit.record import Actor
from webapp.runs.metric_reads import Points, copy_rows, metric_points, points_copy
from webapp.runs.metric_text import (
    concat,
    float_texts,
    int_texts,
    iso_sql,
    iso_texts,
    joined_bytes,
)
from webapp.runs.models import Run

PIECE = 256 * 1024  # bytes gathered (several small series) before a piece goes out
# wall_time_iso: the wall time as ISO 8601 UTC (metric_text.iso_texts), last so that the
# columns before keep their places
CSV_COLUMNS = ("name", "role", "stage", "step", "wall_time", "value", "wall_time_iso")
JSON_COLUMNS = ("step", "stage", "wall_time", "value")


def csv_field(text: str) -> str:
    if any(c in text for c in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


def gathered(pieces: Iterator[bytes]) -> Iterator[bytes]:
    """``pieces`` joined into pieces of at least PIECE bytes (the last may be shorter)."""
    held: list[bytes] = []
    size = 0
    for piece in pieces:
        held.append(piece)
        size += len(piece)
        if size >= PIECE:
            yield b"".join(held)
            held, size = [], 0
    if held:
        yield b"".join(held)


def series_runs(points: Points, *keys: str) -> list[tuple[int, int, tuple]]:
    """``(start, end, values)``: the runs of consecutive points of ``points`` that share the
    values of the columns ``keys`` (``"name"``, ``"role"``, ``"stage"``), in order."""
    columns = [getattr(points, key) for key in keys]
    size = len(points.step)
    cuts = np.zeros(size, dtype=bool)
    for column in columns:
        if not isinstance(column, str) and size > 1:
            differs = pc.not_equal(column.slice(1), column.slice(0, size - 1))
            cuts[1:] |= differs.to_numpy(zero_copy_only=False)
    starts = [0, *np.flatnonzero(cuts).tolist()]
    ends = [*starts[1:], size]
    return [
        (start, end, tuple(c if isinstance(c, str) else c[start].as_py() for c in columns))
        for start, end in zip(starts, ends, strict=True)
    ]


def run_texts(
    runs: list[tuple[int, int, tuple]], text_of: Callable[[tuple], str]
) -> str | pa.Array:
    """Each point's text, ``text_of`` its run's values (``series_runs``): one ``str`` where a
    single run covers the piece."""
    if len(runs) == 1:
        return text_of(runs[0][2])
    texts = pa.array([text_of(values) for *_, values in runs], pa.string())
    counts = [end - start for start, end, _ in runs]
    return pc.take(texts, np.repeat(np.arange(len(runs)), counts))


def csv_chunks(points: Iterable[Points]) -> Iterator[bytes]:
    """The CSV text of ``points``: a header, then pieces of whole lines.

    A line is its series' "name,role,stage" prefix, the step, the wall time, the value (empty
    where None) and the wall time as ISO 8601, a column at a time (``metric_text``). Each line is built as "\\n"
    and the line, so that one element-wise join makes it, and the file ends with "\\n"."""
    yield ",".join(CSV_COLUMNS).encode()
    prefixes: dict[tuple, str] = {}  # "\\n" and "name,role,stage" of every series seen

    def prefix(series: tuple) -> str:
        if (text := prefixes.get(series)) is None:
            text = prefixes[series] = "\n" + ",".join(map(csv_field, series))
        return text

    def lines(piece: Points) -> bytes:
        prefix_texts = run_texts(series_runs(piece, "name", "role", "stage"), prefix)
        step = filled(int_texts(piece.step), "")
        value = filled(float_texts(piece.value), "")
        wall_time = float_texts(piece.wall_time)
        iso = filled(iso_texts(piece.wall_time), "")
        return joined_bytes(concat(prefix_texts, step, wall_time, value, iso, separator=","))

    try:
        yield from gathered(map(lines, points))
    finally:  # closed early: end the read now (a cursor, a COPY read to its end)
        _close(points)
    yield b"\n"


def filled(texts: pa.Array, missing: str) -> pa.Array:
    """``texts`` with ``missing`` for a null."""
    return texts.fill_null(missing) if texts.null_count else texts


def copy_csv_chunks(run: Run) -> Iterator[bytes]:
    """PostgreSQL: the same CSV written by the server (``COPY ... TO STDOUT``), streamed as it
    comes (``copy_rows``); an empty text is written as an empty field (``NULLIF``), as
    ``csv_chunks`` does, and floats in PostgreSQL's shortest exact form."""
    columns = (
        f"name, NULLIF(role, ''), NULLIF(stage, ''), step, wall_time, value, {iso_sql('wall_time')}"
    )
    return copy_rows(points_copy(run, columns), header=(",".join(CSV_COLUMNS) + "\n").encode())


def json_chunks(run: Run, points: Iterable[Points]) -> Iterator[bytes]:
    """``{"run": {...}, "columns": [...], "series": [{"name", "role", "points": [[step,
    stage, wall_time, value], ...]}, ...]}``, one series per (name, role) in order.

    Every point is written as ", [step, stage, wall_time, value]" a column at a time; a
    series' first point goes without its leading ", "."""
    head = {"id": run.pk, "experiment": run.experiment.name, "number": run.number}
    yield (
        f'{{"run": {json.dumps(head)}, "columns": {json.dumps(JSON_COLUMNS)}, "series": ['
    ).encode()
    current = None  # (name, role) of the series being written

    def pieces(piece: Points) -> Iterator[bytes]:
        nonlocal current
        stage = run_texts(series_runs(piece, "stage"), lambda values: json.dumps(values[0]))
        step = filled(int_texts(piece.step), "null")
        value = filled(float_texts(piece.value), "null")
        fields = concat(step, stage, float_texts(piece.wall_time), value, separator=", ")
        texts = concat(", [", fields, "]")
        for start, end, series in series_runs(piece, "name", "role"):
            text = joined_bytes(texts.slice(start, end - start))
            if series != current:
                opening = "" if current is None else "]}, "
                name, role = map(json.dumps, series)
                yield f'{opening}{{"name": {name}, "role": {role}, "points": ['.encode()
                current = series
                text = text[2:]  # the series' first point: no ", " before it
            yield text

    try:
        yield from gathered(text for piece in points for text in pieces(piece))
    finally:  # closed early: end the read now (a cursor, a COPY read to its end)
        _close(points)
    yield b"]}]}" if current is not None else b"]}"


def _close(points: Iterable) -> None:
    if close := getattr(points, "close", None):
        close()


def csv_body(run: Run) -> Iterator:
    """The pieces of ``run``'s metrics.csv, by the database's writer."""
    if connection.vendor == "postgresql":
        return copy_csv_chunks(run)
    return csv_chunks(metric_points(run))


def encoded(body: Iterator) -> Iterator[bytes]:
    try:
        for piece in body:
            yield piece if isinstance(piece, bytes) else piece.encode()
    finally:  # closed early (the client went away): close the body's cursor or COPY now
        if close := getattr(body, "close", None):
            close()


def _download(body: Iterator, content_type: str, filename: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(encoded(body), content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_GET
def metrics_csv(request: HttpRequest, pk: int) -> StreamingHttpResponse:
    run = authorize_hidden(Actor.from_request(request), Run, pk, "run.download")
    return _download(csv_body(run), "text/csv; charset=utf-8", f"run-{run.pk}-metrics.csv")


@require_GET
def metrics_json(request: HttpRequest, pk: int) -> StreamingHttpResponse:
    run = authorize_hidden(Actor.from_request(request), Run, pk, "run.download")
    return _download(
        json_chunks(run, metric_points(run)), "application/json", f"run-{run.pk}-metrics.json"
    )
