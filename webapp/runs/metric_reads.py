"""A run's metric points read for the downloads, fast: as columns, and as the server's COPY.

``metric_points`` gives every point of a run as ``Points`` (columns, pyarrow arrays), name by
name in the order the points came in (the ``metric_run_name_seq`` index), CHUNK points at a
time. On SQLite the rows come through ``sqlite3``, whose price is the Python objects of a row
(~0.45 µs a row for three numbers, more than SQLite's own reading; each further column ~0.07
µs): a point's name, role and stage would be three more strings a row, so each name is read on
its own (one index seek finds the next name and its first point), and role and stage are read
again only for the points whose role or stage is not that first point's. On PostgreSQL the
server writes the points as CSV (``COPY``, floats in its shortest exact form: the default
``extra_float_digits`` 1) and Arrow's CSV reader makes the columns (its float parser rounds
exactly): no row passes through Python.

``copy_rows`` streams a COPY's output: psycopg's ``Copy`` iterator costs a few microseconds of
Python a message (one message a row), more than the server's own work on 100k rows, so the
messages are read with libpq's blocking ``PQgetCopyData`` through psycopg's ``pgconn`` (one C
call each) and gathered into pieces of COPY_PIECE bytes. The COPY is always read to its end,
also when the client goes away mid-download, so the connection is idle again for the next query.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
from django.db import DatabaseError, connection
from psycopg import pq

from webapp.runs.models import MetricPoint, Run

CHUNK = 20_000  # points per fetch on SQLite
COPY_PIECE = 256 * 1024  # bytes of COPY output per piece
COPY_BLOCK = 1 << 20  # bytes of COPY output Arrow parses at a time (PostgreSQL's points)
POINT_TYPE = pa.struct(
    [("step", pa.int64()), ("wall_time", pa.float64()), ("value", pa.float64())]
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
    """``metric_points`` a name at a time (any database; the one SQLite uses).

    A point whose role or stage is not its name's first point's comes with its wall time
    NULL (a wall time is never NULL), and a second read of the name gives the wall time, role
    and stage of those points, in the same order: points only come after the ones there are
    (ids grow), so both reads see the same ones. A name that appears meanwhile is in the
    next download."""
    table = connection.ops.quote_name(MetricPoint._meta.db_table)
    first_point = (
        f"SELECT name, role, stage FROM {table} WHERE run_id = %s AND name {{}} %s"
        " ORDER BY name, id LIMIT 1"
    )
    points = (
        "SELECT step, CASE WHEN role = %s AND stage = %s THEN wall_time END, value"
        f" FROM {table} WHERE run_id = %s AND name = %s ORDER BY id"
    )
    others = (
        f"SELECT wall_time, role, stage FROM {table} WHERE run_id = %s AND name = %s"
        " AND NOT (role = %s AND stage = %s) ORDER BY id"
    )
    after, name = ">=", ""
    while True:
        with connection.cursor() as cursor, connection.cursor() as other_cursor:
            cursor.execute(first_point.format(after), [run.pk, name])
            if (first := cursor.fetchone()) is None:
                return
            name, role, stage = first
            cursor.execute(points, [role, stage, run.pk, name])
            other_read = False
            while rows := cursor.fetchmany(CHUNK):
                step, wall_time, value = pa.array(rows, type=POINT_TYPE).flatten()
                if not wall_time.null_count:
                    yield Points(name, role, stage, step, wall_time, value)
                    continue
                if not other_read:
                    other_cursor.execute(others, [run.pk, name, role, stage])
                    other_read = True
                other = other_cursor.fetchmany(wall_time.null_count)
                yield _with_others(name, role, stage, step, wall_time, value, other)
        after = ">"


def _with_others(name: str, role: str, stage: str, step: pa.Array, wall_time: pa.Array,
                 value: pa.Array, other: list[tuple]) -> Points:  # fmt: skip
    """Points with the wall time, role and stage of those whose wall time is NULL from
    ``other`` (their rows of ``(wall_time, role, stage)``, in order)."""
    differs = wall_time.is_null().to_numpy(zero_copy_only=False)
    if len(other) != differs.sum():
        raise DatabaseError("metrics: a name's points changed while they were read")
    walls = wall_time.to_numpy(zero_copy_only=False).copy()
    walls[differs] = [row[0] for row in other]
    roles = np.full(len(walls), role, dtype=object)
    stages = np.full(len(walls), stage, dtype=object)
    roles[differs] = [row[1] for row in other]
    stages[differs] = [row[2] for row in other]
    return Points(name, pa.array(roles, pa.string()), pa.array(stages, pa.string()),
                  step, pa.array(walls, pa.float64()), value)  # fmt: skip


def points_copy(run: Run, columns: str) -> str:
    """The COPY of ``run``'s points in download order, as CSV.

    The order is the ``metric_run_name_seq`` index's. The planner rates that index's heap
    reads as random (a run's names interleave) and, at 1M points, would rather sort the run's
    100k rows by name in the database's collation, spilled to disk: ~200 ms of the server's
    time against ~40 ms for the index scan. So sorting is off for this COPY alone: ``SET
    LOCAL`` in the same query string (one transaction), ``RESET`` after it."""
    select = (
        f"SELECT {columns} FROM {MetricPoint._meta.db_table}"
        f" WHERE run_id = {int(run.pk)} ORDER BY name, id"
    )
    return (
        f"SET LOCAL enable_sort = off; COPY ({select}) TO STDOUT WITH (FORMAT csv);"
        " RESET enable_sort"
    )


def copy_points(run: Run) -> Iterator[Points]:
    """PostgreSQL: ``metric_points`` from the server's CSV (``COPY``), parsed by Arrow a
    piece of COPY_BLOCK bytes at a time (a piece holds whole rows: COPY sends a row a
    message). An empty text is written quoted (``""``) and read back as itself; only a
    missing number is an empty field (null)."""
    query = points_copy(run, ", ".join(COPY_TYPES))
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
    """The output of the COPY in ``query`` (``... TO STDOUT``; commands before and after it
    in the same string run too) after ``header``, in pieces of whole rows, ``piece_size``
    bytes or a row more (the last may be shorter, or empty)."""
    connection.ensure_connection()  # Django's connections are per thread: no other user
    pgconn = connection.connection.pgconn  # psycopg's libpq connection
    piece = bytearray(header)
    pgconn.send_query(query.encode())
    result = pgconn.get_result()
    while result is not None and result.status == pq.ExecStatus.COMMAND_OK:  # a SET before
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
