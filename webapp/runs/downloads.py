"""A run's metrics as files: ``/runs/<id>/metrics.csv`` and ``/runs/<id>/metrics.json``.

Every series the run reported (every ``MetricPoint``), each point with its step, stage, wall
time (unix seconds, as the run emitted it) and value (empty / null for NaN or inf), series by
series (name, then the order the points came in: the ``metric_run_name_seq`` index, so the
database streams them without sorting). Both are streamed: rows are read CHUNK at a time with a
server-side cursor where the database has one, and written out as they come, so a run of a
million points costs neither the memory nor the wait of building the file first.

On PostgreSQL the server writes the CSV itself (``COPY ... TO STDOUT WITH (FORMAT csv)``,
streamed through psycopg as it comes): no row passes through Python. Elsewhere (SQLite) it is
written here, a series' "name,role,stage," prefix once per series and a field quoted (RFC 4180)
only when it holds a comma, a quote or a line break; ``csv.writer`` measured no faster. Both
give the same columns and values (a float in its shortest exact form; PostgreSQL writes an
integral float without ``.0``). ``benchmarks/web_pages.py`` measures the rate. Owner and staff
only: another user's run is a 404 (``authorize_hidden``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from django.db import DatabaseError, connection
from django.http import HttpRequest, StreamingHttpResponse
from django.views.decorators.http import require_GET
from psycopg import pq

from webapp.accounts.access import authorize_hidden
from webapp.audit.record import Actor
from webapp.runs.models import MetricPoint, Run

CHUNK = 5000  # rows per fetch, and per piece of the response
COPY_PIECE = 256 * 1024  # bytes of COPY output per piece of the response
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


def csv_chunks(rows: Iterator[tuple]) -> Iterator[str]:
    """The CSV text of ``rows``: a header, then pieces of CHUNK lines."""
    yield ",".join(CSV_COLUMNS) + "\n"
    prefixes: dict[tuple, str] = {}  # "name,role,stage," repeats on every line of a series
    lines: list[str] = []
    for name, role, stage, step, wall_time, value in rows:
        if (prefix := prefixes.get((name, role, stage))) is None:
            prefix = ",".join(map(csv_field, (name, role, stage))) + ","
            prefixes[(name, role, stage)] = prefix
        lines.append(
            f"{prefix}{'' if step is None else step},{wall_time!r},"
            f"{'' if value is None else repr(value)}\n"
        )
        if len(lines) == CHUNK:
            yield "".join(lines)
            lines = []
    if lines:
        yield "".join(lines)


def copy_csv_chunks(run: Run) -> Iterator[bytes]:
    """PostgreSQL: the same CSV written by the server (``COPY ... TO STDOUT``), streamed as
    it comes; an empty text is written as an empty field (``NULLIF``), as ``csv_chunks`` does,
    and floats in PostgreSQL's shortest exact form.

    COPY sends one message per row. psycopg's ``Copy`` iterator costs a few microseconds of
    Python a message (its wait/generator machinery), more than the server's own work on 100k
    rows, so the messages are read here with libpq's blocking ``PQgetCopyData`` through
    psycopg's ``pgconn`` (one C call each) and gathered into
    pieces of COPY_PIECE bytes. The COPY is always read to its end, also when the client goes
    away mid-download, so the connection is idle again for the next query."""
    query = (
        "COPY (SELECT name, NULLIF(role, ''), NULLIF(stage, ''), step, wall_time, value"
        f" FROM {MetricPoint._meta.db_table} WHERE run_id = {int(run.pk)} ORDER BY name, id)"
        " TO STDOUT WITH (FORMAT csv)"
    )
    connection.ensure_connection()  # Django's connections are per thread: no other user
    pgconn = connection.connection.pgconn  # psycopg's libpq connection
    piece = bytearray((",".join(CSV_COLUMNS) + "\n").encode())
    pgconn.send_query(query.encode())
    result = pgconn.get_result()
    if result is None or result.status != pq.ExecStatus.COPY_OUT:
        error = result.error_message.decode(errors="replace") if result else "no result"
        _drain_results(pgconn)
        raise DatabaseError(f"metrics.csv: COPY failed: {error}")
    get_copy_data = pgconn.get_copy_data
    try:
        while (row := get_copy_data(0))[0] > 0:  # blocks until a row (or the end) comes
            piece += row[1]
            if len(piece) >= COPY_PIECE:
                yield bytes(piece)
                piece.clear()
    except GeneratorExit:  # the client went away: read the rest, leave the connection idle
        while get_copy_data(0)[0] > 0:
            pass
        _drain_results(pgconn)
        raise
    if error := _drain_results(pgconn):
        raise DatabaseError(f"metrics.csv: COPY ended with an error: {error}")
    yield bytes(piece)


def _drain_results(pgconn) -> str | None:
    """Read the results left after a query, so the connection is idle; the first error's
    message, or None."""
    error = None
    while (result := pgconn.get_result()) is not None:
        if (
            result.status not in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.COPY_OUT)
            and error is None
        ):
            error = result.error_message.decode(errors="replace")
    return error


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


def csv_body(run: Run) -> Iterator:
    """The pieces of ``run``'s metrics.csv, by the database's writer."""
    if connection.vendor == "postgresql":
        return copy_csv_chunks(run)
    return csv_chunks(metric_rows(run))


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
        json_chunks(run, metric_rows(run)), "application/json", f"run-{run.pk}-metrics.json"
    )
