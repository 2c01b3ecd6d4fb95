"""``/runs/<id>/metrics.csv`` and ``metrics.json`` as streamed by the database's writer
(PostgreSQL: the server's COPY read message by message; SQLite and the JSON: written from the
points as columns): every point read back with its fields, awkward text quoted, missing values
empty, the wall time also as ISO 8601 (``wall_time_iso``); the column-at-a-time text is byte for byte what a plain row-by-row writer gives (floats
as ``repr``) whatever the role/stage changes within a name; and a download the client abandons
midway leaves the connection usable for the next query and the next download."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from api_helpers import make_experiment, make_run, session_client
from django.db import connection

from webapp.runs.downloads import csv_body, csv_chunks, encoded, json_chunks
from webapp.runs.metric_reads import CHUNK, COPY_BLOCK, COPY_PIECE, metric_points, named_points
from webapp.runs.models import MetricPoint, Run

pytestmark = pytest.mark.django_db


def _read(body: bytes) -> list[tuple]:
    rows = list(csv.reader(io.StringIO(body.decode())))
    assert rows[0] == ["name", "role", "stage", "step", "wall_time", "value", "wall_time_iso"]
    for *_, wall, _value, iso in rows[1:]:
        assert iso == _iso(float(wall)), (wall, iso)
    return [
        (name, role, stage, int(step) if step else None, float(wall), float(value) if value else None)
        for name, role, stage, step, wall, value, _iso_text in rows[1:]
    ]  # fmt: skip


def _iso(wall: float) -> str:
    """The ISO 8601 text of unix seconds ``wall`` (to the millisecond, truncated; empty past the
    year 9999), by the standard library: what both CSV writers must give."""
    if not 0 <= wall < 253_402_300_800:
        return ""
    millis = int(wall * 1000 // 1)
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=millis)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis % 1000:03d}Z"


def _expected(run: Run) -> list[tuple]:
    points = MetricPoint.objects.filter(run=run).order_by("name", "id")
    return list(points.values_list("name", "role", "stage", "step", "wall_time", "value"))


def test_every_point_reads_back_with_awkward_text_quoted_and_missing_values_empty(alice):
    run = make_run(make_experiment(alice, "csv"))
    awkward = [
        ('loss, "total"', "trainer", "", None, 1_733_150_000.125, None),
        ("line\nbreak", "", "grpo", 0, 2.0, -0.25),
        ("a", "explorer", "sft, warmup", 3, 1e-7, 1e16),
        ("a", "trainer", "grpo", 4, 0.1, 0.30000000000000004),
        ("b", "explorer", "", 2**40, 3.0, 0.0),
    ]
    MetricPoint.objects.bulk_create(
        MetricPoint(run=run, name=n, role=r, stage=s, step=st, wall_time=w, value=v)
        for n, r, s, st, w, v in awkward
    )
    body = b"".join(session_client(alice).get(f"/runs/{run.pk}/metrics.csv").streaming_content)
    assert _read(body) == _expected(run)
    assert len(_read(body)) == len(awkward)
    assert b"0.30000000000000004" in body and b"1.733150000125e+09" not in body
    # the wall time also as ISO 8601 UTC (issue 31: epoch seconds alone)
    assert b",1733150000.125,,2024-12-02T14:33:20.125Z\n" in body


@pytest.mark.parametrize("kind", ["csv", "json"])
def test_an_abandoned_download_leaves_the_connection_usable(alice, kind):
    run = make_run(make_experiment(alice, "big"))
    n = max(CHUNK, COPY_PIECE // 40, COPY_BLOCK // 40) * 2 + 7  # several pieces on any writer
    MetricPoint.objects.bulk_create(
        (MetricPoint(run=run, name=f"m{i % 3}", role="trainer", step=i, wall_time=i + 0.5,
                     value=i / 7) for i in range(n)),
        batch_size=5000,
    )  # fmt: skip
    body = csv_body(run) if kind == "csv" else json_chunks(run, metric_points(run))
    pieces = encoded(body)  # what the response streams
    assert next(pieces) and next(pieces)  # more than one piece: it stops midway
    pieces.close()  # the client went away (the server closes the response's iterator)
    assert Run.objects.filter(pk=run.pk).count() == 1  # the connection answers again
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
        if connection.vendor == "postgresql":  # the COPY's planner setting ended with it
            cursor.execute("SHOW enable_sort")
            assert cursor.fetchone() == ("on",)
    client = session_client(alice)
    body = b"".join(client.get(f"/runs/{run.pk}/metrics.{kind}").streaming_content)
    if kind == "csv":
        assert len(_read(body)) == n
        assert _read(body) == _expected(run)
    else:
        assert body == _reference_json(run, _expected(run))
        assert sum(len(series["points"]) for series in json.loads(body)["series"]) == n


# Floats in every notation repr uses (and Arrow's cast does not share), with their neighbours.
FLOATS = [
    0.0, -0.0, 3.0, -516.0, 0.1, 0.30000000000000004, 1e-4, 9.999999999999999e-05, 1e-5,
    -1.321158864366159e-05, -7.431470752516421e-09, 5e-324, 1e15, 1e16, 9999999999999998.0,
    2.0**53, 123456789012345.67, 5234708055733.116, 28594126179.066216, 1733150000.125,
    1.7976931348623157e308, -2.5e-300, 1e22,
]  # fmt: skip


def _reference_csv(rows: list[tuple]) -> bytes:
    """The CSV a plain writer gives: row by row, ``repr`` floats, RFC 4180 quoting."""

    def field(text: str) -> str:
        quote = any(c in text for c in ',"\n\r')
        return '"' + text.replace('"', '""') + '"' if quote else text

    lines = ["name,role,stage,step,wall_time,value,wall_time_iso\n"]
    for name, role, stage, step, wall_time, value in rows:
        lines.append(
            f"{field(name)},{field(role)},{field(stage)},{'' if step is None else step},"
            f"{wall_time!r},{'' if value is None else repr(value)},{_iso(wall_time)}\n"
        )
    return "".join(lines).encode()


def _reference_json(run: Run, rows: list[tuple]) -> bytes:
    """The JSON ``json.dumps`` gives: a series per run of points with one (name, role)."""
    series: list[dict] = []
    for name, role, stage, step, wall_time, value in rows:
        if not series or (series[-1]["name"], series[-1]["role"]) != (name, role):
            series.append({"name": name, "role": role, "points": []})
        series[-1]["points"].append([step, stage, wall_time, value])
    head = {"id": run.pk, "experiment": run.experiment.name, "number": run.number}
    columns = ["step", "stage", "wall_time", "value"]
    return json.dumps({"run": head, "columns": columns, "series": series}).encode()


@pytest.fixture
def mixed_run(alice):
    """Names reported by one role in one stage, and names whose role or stage changes
    (a stage switch, two roles interleaved, an empty role), with every kind of float."""
    run = make_run(make_experiment(alice, "mixed"))
    points = []
    for i, wall in enumerate(FLOATS):  # one role, one stage: the usual name
        points.append(("actor/kl", "trainer", "grpo", i, wall, FLOATS[-1 - i]))
    for i in range(40):  # a stage switch half way, and two roles taking turns
        stage = "sft, warmup" if i < 20 else "grpo"
        points.append(("eval/accuracy", "explorer", stage, i, 1_733_150_000.5 + i, i / 3))
        role = ("explorer", "trainer", "")[i % 3]
        points.append(("system/cpu", role, "grpo", None if i % 7 == 0 else i, i * 0.1, None))
    points.append(('quoted "name", with\nbreak', "trainer", "", 2**40, 3.0, -0.0))
    points.append(("zz/last", 'role "q"', "stage\r", 1, 1e-7, 1e16))
    MetricPoint.objects.bulk_create(
        MetricPoint(run=run, name=n, role=r, stage=s, step=st, wall_time=w, value=v)
        for n, r, s, st, w, v in points
    )
    return run


def test_the_json_is_byte_for_byte_what_json_dumps_gives(alice, mixed_run):
    body = b"".join(
        session_client(alice).get(f"/runs/{mixed_run.pk}/metrics.json").streaming_content
    )
    expected = _reference_json(mixed_run, _expected(mixed_run))
    assert body == expected
    series = json.loads(body)["series"]
    assert [s["role"] for s in series if s["name"] == "system/cpu"][:4] == [
        "explorer",
        "trainer",
        "",
        "explorer",
    ]
    assert [p[2] for p in series[0]["points"]] == FLOATS  # actor/kl: every float exact


def test_the_csv_written_from_columns_is_what_a_row_writer_gives(mixed_run):
    """The column writer over ``named_points`` (SQLite's reader; it runs on any database) is
    the reference byte for byte; the view's CSV reads back to the same points (PostgreSQL's
    COPY writes an integral float without ``.0``)."""
    rows = _expected(mixed_run)
    assert b"".join(csv_chunks(named_points(mixed_run))) == _reference_csv(rows)
    pieces = list(named_points(mixed_run))
    assert [isinstance(p.role, str) for p in pieces] == [True, False, True, False, True]
    body = b"".join(encoded(csv_body(mixed_run)))
    assert _read(body) == rows
