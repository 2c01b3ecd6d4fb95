"""``/runs/<id>/metrics.csv`` as streamed by the database's writer (PostgreSQL: the server's
COPY read message by message; SQLite: written in Python): every point read back with its
fields, awkward text quoted, missing values empty, and a download the client abandons midway
leaves the connection usable for the next query and the next download."""

from __future__ import annotations

import csv
import io

import pytest
from api_helpers import make_experiment, make_run, make_user, session_client
from django.db import connection

from webapp.runs.downloads import CHUNK, COPY_PIECE, csv_body, encoded
from webapp.runs.models import MetricPoint, Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice():
    return make_user("alice")


def _read(body: bytes) -> list[tuple]:
    rows = list(csv.reader(io.StringIO(body.decode())))
    assert rows[0] == ["name", "role", "stage", "step", "wall_time", "value"]
    return [
        (name, role, stage, int(step) if step else None, float(wall), float(value) if value else None)
        for name, role, stage, step, wall, value in rows[1:]
    ]  # fmt: skip


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


def test_an_abandoned_download_leaves_the_connection_usable(alice):
    run = make_run(make_experiment(alice, "big"))
    n = max(CHUNK, COPY_PIECE // 40) * 2 + 7  # several pieces on either writer
    MetricPoint.objects.bulk_create(
        (MetricPoint(run=run, name=f"m{i % 3}", role="trainer", step=i, wall_time=i + 0.5,
                     value=i / 7) for i in range(n)),
        batch_size=5000,
    )  # fmt: skip
    pieces = encoded(csv_body(run))  # what the response streams
    assert next(pieces) and next(pieces)  # more than one piece: it stops midway
    pieces.close()  # the client went away (the server closes the response's iterator)
    assert Run.objects.filter(pk=run.pk).count() == 1  # the connection answers again
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
    client = session_client(alice)
    body = b"".join(client.get(f"/runs/{run.pk}/metrics.csv").streaming_content)
    assert len(_read(body)) == n
    assert _read(body) == _expected(run)
