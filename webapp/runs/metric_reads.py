"""A run's metric points read for the downloads, fast: as columns, and as the server's COPY.

``metric_points`` gives every point of a run as ``Points`` (columns, pyarrow arrays), name by
name in the order the points came in (the ``metric_run_name_seq`` index), CHUNK points at a
time. On SQLite the rows come through ``sqlite3``, whose price is the Python objects of a row
(~0.4 µs a row for three numbers, more than SQLite's own reading): a point's name, role and
stage would be three more strings a row, so each name is read on its own (one index seek finds
the next name and its first point), and its points send role and stage as NULL where they are
that first point's. On PostgreSQL the server writes the points as CSV (``COPY``, with floats in
its shortest exact form, ``extra_float_digits`` 1) and Arrow's CSV reader makes the columns
(its float parser rounds exactly): no row passes through Python.

``copy_rows`` streams a COPY's output: psycopg's ``Copy`` iterator costs a few microseconds of
Python a message (one message a row), more than the server's own work on 100k rows, so the
messages are read with libpq's blocking ``PQgetCopyData`` through psycopg's ``pgconn`` (one C
call each) and gathered into pieces of COPY_PIECE bytes. The COPY is always read to its end,
also when the client goes away mid-download, so the connection is idle again for the next query.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.csv as pa_csv
from django.db import DatabaseError, connection
from psycopg import pq

from webapp.runs.models import MetricPoint, Run

CHUNK = 20_000  # points per fetch on SQLite
COPY_PIECE = 256 * 1024  # bytes of COPY output per piece
COPY_BLOCK = 1 << 20  # bytes of COPY output Arrow parses at a time (PostgreSQL's points)
POINT_TYPE = pa.struct(
    [("step", pa.int64()), ("wall_time", pa.float64()), ("value", pa.float64()),
     ("other", pa.string())]
)  # fmt: skip
COPY_TYPES = {
    "name": pa.string(), "role": pa.string(), "stage": pa.string(),
    "step": pa.int64(), "wall_time": pa.float64(), "value": pa.float64(),
}  # fmt: skip


@dataclass
class Points:
    """Consecutive points as columns. ``name``/``role``/``stage`` are a ``str`` where every
    point has it (a name reported by one role in one stage: the usual case), else a string
    array (one per point)."""

    name: str | pa.Array
    role: str | pa.Array
    stage: str | pa.Array
    step: pa.Array
    wall_time: pa.Array
    value: pa.Array


def metric_points(run: Run) -> Iterator[Points]:
    """Every point of ``run``, series by series (name, then the order they came in)."""
    if connection.vendor == "postgresql":
        return copy_points(run)
    return named_points(run)


def named_points(run: Run) -> Iterator[Points]:
    """``metric_points`` a name at a time (any database; the one SQLite uses). Each name is one
    statement, so one consistent read; a name that appears meanwhile is in the next download."""
    table = connection.ops.quote_name(MetricPoint._meta.db_table)
    first_point = (
        f"SELECT name, role, stage FROM {table} WHERE run_id = %s AND name {{}} %s"
        " ORDER BY name, id LIMIT 1"
    )
    # length-prefixed ("7:trainergrpo"): one text, whatever characters role and stage hold
    points = (
        "SELECT step, wall_time, value, CASE WHEN role = %s AND stage = %s THEN NULL"
        " ELSE CAST(LENGTH(role) AS TEXT) || ':' || role || stage END"
        f" FROM {table} WHERE run_id = %s AND name = %s ORDER BY id"
    )
    after, name = ">=", ""
    while True:
        with connection.cursor() as cursor:
            cursor.execute(first_point.format(after), [run.pk, name])
            if (first := cursor.fetchone()) is None:
                return
            name, role, stage = first
            cursor.execute(points, [role, stage, run.pk, name])
            while rows := cursor.fetchmany(CHUNK):
                yield _points(name, role, stage, pa.array(rows, type=POINT_TYPE))
        after = ">"


def _points(name: str, role: str, stage: str, columns: pa.StructArray) -> Points:
    step, wall_time, value, other = (columns.field(i) for i in range(4))
    if other.null_count < len(other):  # another role or stage within the name
        roles, stages = [], []
        for text in other.to_pylist():
            if text is None:
                roles.append(role), stages.append(stage)
            else:
                length, rest = text.split(":", 1)
                roles.append(rest[: int(length)]), stages.append(rest[int(length) :])
        return Points(name, pa.array(roles, pa.string()), pa.array(stages, pa.string()),
                      step, wall_time, value)  # fmt: skip
    return Points(name, role, stage, step, wall_time, value)


def points_query(run: Run, columns: str) -> str:
    """The SELECT of ``run``'s points in download order, for a COPY."""
    return (
        f"SELECT {columns} FROM {MetricPoint._meta.db_table}"
        f" WHERE run_id = {int(run.pk)} ORDER BY name, id"
    )


def copy_points(run: Run) -> Iterator[Points]:
    """PostgreSQL: ``metric_points`` from the server's CSV (``COPY``), parsed by Arrow a
    piece of COPY_BLOCK bytes at a time (a piece holds whole rows: COPY sends a row a
    message). An empty text is written quoted (``""``) and read back as itself; only a
    missing number is an empty field (null)."""
    query = f"COPY ({points_query(run, ', '.join(COPY_TYPES))}) TO STDOUT WITH (FORMAT csv)"
    read_options = pa_csv.ReadOptions(
        column_names=list(COPY_TYPES), block_size=2 * COPY_BLOCK, use_threads=False
    )
    parse_options = pa_csv.ParseOptions(newlines_in_values=True)
    convert_options = pa_csv.ConvertOptions(
        column_types=COPY_TYPES, strings_can_be_null=False, quoted_strings_can_be_null=False
    )
    for piece in copy_rows(query, piece_size=COPY_BLOCK):
        if piece:
            table = pa_csv.read_csv(
                pa.BufferReader(piece), read_options, parse_options, convert_options
            )
            yield Points(*(column.combine_chunks() for column in table.columns))


def copy_rows(query: str, header: bytes = b"", piece_size: int = COPY_PIECE) -> Iterator[bytes]:
    """The output of the COPY ``query`` (``... TO STDOUT``) after ``header``, in pieces of
    whole rows, ``piece_size`` bytes or a row more (the last may be shorter, or empty)."""
    connection.ensure_connection()  # Django's connections are per thread: no other user
    pgconn = connection.connection.pgconn  # psycopg's libpq connection
    piece = bytearray(header)
    pgconn.send_query(query.encode())
    result = pgconn.get_result()
    if result is None or result.status != pq.ExecStatus.COPY_OUT:
        error = result.error_message.decode(errors="replace") if result else "no result"
        _drain_results(pgconn)
        raise DatabaseError(f"metrics: COPY failed: {error}")
    get_copy_data = pgconn.get_copy_data
    try:
        while (row := get_copy_data(0))[0] > 0:  # blocks until a row (or the end) comes
            piece += row[1]
            if len(piece) >= piece_size:
                yield bytes(piece)
                piece.clear()
    except GeneratorExit:  # the client went away: read the rest, leave the connection idle
        while get_copy_data(0)[0] > 0:
            pass
        _drain_results(pgconn)
        raise
    if error := _drain_results(pgconn):
        raise DatabaseError(f"metrics: COPY ended with an error: {error}")
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
