"""``/runs/`` at scale (issue 23): the run's ``latest_reward`` column that the ingestor keeps
(the table reads and sorts by it instead of computing it per row), the page's query count
that does not grow with the rows shown, the sort by duration, and the filter form's options
written in Python."""

from __future__ import annotations

import importlib
import re
from datetime import UTC, datetime, timedelta

import pytest
from api_helpers import make_experiment, make_run, make_user, session_client
from django.apps import apps
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from webapp.events.models import RunEvent
from webapp.experiments.models import Tag
from webapp.runs.models import MetricPoint, Run, RunStatus
from webapp.runs.table import PAGE_SIZE
from webapp.runs.telemetry import latest_reward, record_metrics

pytestmark = pytest.mark.django_db

ROLLOUT, CRITIC = "rollout/reward/mean", "critic/rewards/mean"


@pytest.fixture
def run(alice):
    return make_run(make_experiment(alice, "e"), number=1, status=RunStatus.RUNNING)


def _event(payload: dict, step: int, role: str = "explorer") -> RunEvent:
    at = datetime.fromtimestamp(1_733_150_000 + step, tz=UTC)
    return RunEvent(run_key="k", stream_id=f"{step}-0", kind="metric", role=role, stage="",
                    step=step, payload=payload, emitted_at=at)  # fmt: skip


def _ingest(run: Run, *payloads: dict, role: str = "explorer") -> None:
    """One ingestor batch: a metric event per payload, steps counting on from the run's."""
    start = MetricPoint.objects.filter(run=run).count()
    record_metrics(run, [_event(p, start + i, role) for i, p in enumerate(payloads)])


def _stored(run: Run) -> float | None:
    return Run.objects.get(pk=run.pk).latest_reward


def _computed(run: Run) -> float | None:
    """What the table computed per row before the column (the same expression)."""
    return Run.objects.filter(pk=run.pk).annotate(r=latest_reward()).get().r


# ----------------------------------------------------------- latest_reward, kept by the ingestor


def test_the_ingestor_keeps_the_newest_rollout_reward_across_batches(run):
    assert _stored(run) is None
    _ingest(run, {ROLLOUT: 0.1, "actor/pg_loss": 1.0}, {ROLLOUT: 0.4})
    assert _stored(run) == 0.4 and run.latest_reward == 0.4
    _ingest(run, {ROLLOUT: 0.25})
    assert _stored(run) == 0.25
    _ingest(run, {"actor/pg_loss": 0.5, "response_length/mean": 12.0})  # no reward: unchanged
    assert _stored(run) == 0.25 == _computed(run)


def test_the_trainers_reward_counts_until_the_explorer_reports_one(run):
    _ingest(run, {CRITIC: 0.3}, role="trainer")
    assert _stored(run) == 0.3
    _ingest(run, {ROLLOUT: 0.6})
    assert _stored(run) == 0.6
    _ingest(run, {CRITIC: 0.9}, role="trainer")  # the explorer's still comes first
    assert _stored(run) == 0.6 == _computed(run)


def test_a_newest_reward_that_is_not_a_number_falls_back_as_the_per_row_expression_did(run):
    _ingest(run, {CRITIC: 0.3}, role="trainer")
    _ingest(run, {ROLLOUT: 0.5})
    _ingest(run, {ROLLOUT: float("nan")})  # stored as null: the rollout series' newest is null
    assert _stored(run) == 0.3 == _computed(run)
    _ingest(run, {ROLLOUT: float("inf"), CRITIC: float("nan")})
    assert _stored(run) is None and _computed(run) is None


def test_each_run_keeps_its_own_reward(alice, run):
    other = make_run(run.experiment, number=2)
    _ingest(run, {ROLLOUT: 0.7})
    _ingest(other, {ROLLOUT: 0.2})
    assert (_stored(run), _stored(other)) == (0.7, 0.2)


def test_the_migration_fills_the_column_of_runs_recorded_before_it(alice, run):
    other = make_run(run.experiment, number=2)
    MetricPoint.objects.bulk_create(
        MetricPoint(run=r, name=name, step=i, wall_time=i, value=value)
        for i, (r, name, value) in enumerate(
            [(run, ROLLOUT, 0.1), (run, ROLLOUT, 0.8), (other, CRITIC, 0.35)]
        )
    )
    assert _stored(run) is None and _stored(other) is None  # written around the ingestor
    migration = importlib.import_module("webapp.runs.migrations.0008_run_latest_reward")
    migration.fill(apps, None)
    assert (_stored(run), _stored(other)) == (0.8, 0.35)


def test_the_table_shows_and_sorts_by_the_stored_reward(alice, run):
    second = make_run(run.experiment, number=2)
    third = make_run(run.experiment, number=3)
    _ingest(run, {ROLLOUT: 0.9}, {ROLLOUT: 0.2})
    _ingest(second, {ROLLOUT: 0.5})
    body = session_client(alice).get("/runs/?sort=-reward").content.decode()
    ids = [int(pk) for pk in re.findall(r'data-run-id="(\d+)"', body)]
    assert ids == [second.pk, run.pk, third.pk]  # no reward: last
    assert '<td data-field="reward">0.500</td>' in body
    assert '<td data-field="reward">0.200</td>' in body


# ------------------------------------------------------------------------------ query count


def _many_runs(owner, n: int) -> list[Run]:
    """``n`` runs as the table shows them at their fullest: tags, notes, a reward, timings."""
    experiment = make_experiment(owner, f"many-{n}")
    now = timezone.now()
    runs = Run.objects.bulk_create(
        Run(experiment=experiment, number=i + 1, config_yaml="", config={},
            status=RunStatus.SUCCEEDED, notes=f"note {i}", step=i, total_steps=100,
            latest_reward=i / 10, last_eval_accuracy=0.5, best_eval_accuracy=0.6,
            started_at=now - timedelta(minutes=i + 5), finished_at=now)
        for i in range(n)
    )  # fmt: skip
    tags = [Tag.objects.get_or_create(name=f"t{k}")[0] for k in range(3)]
    through = Run.tags.through
    through.objects.bulk_create(
        through(run_id=r.pk, tag_id=t.pk) for r in runs for t in tags[: 1 + r.number % 3]
    )
    return runs


@pytest.mark.parametrize(
    "params", ["", "sort=-reward", "sort=duration", "sort=-eval", "tag=t0", "q=many", "status=succeeded"]
)  # fmt: skip
def test_the_query_count_does_not_grow_with_the_rows_on_the_page(params):
    few, lots = make_user("few"), make_user("lots")
    _many_runs(few, 1)
    _many_runs(lots, PAGE_SIZE)
    counts = []
    for user in (few, lots):
        client = session_client(user)
        client.get(f"/runs/?{params}")  # the session is read, the user cached
        with CaptureQueriesContext(connection) as queries:
            response = client.get(f"/runs/?{params}")
        assert response.status_code == 200
        shown = len(re.findall(r'data-run-id="\d+"', response.content.decode()))
        counts.append((shown, len(queries)))
    (one, one_count), (full, full_count) = counts
    assert (one, full) == (1, PAGE_SIZE)
    assert one_count == full_count, counts


# -------------------------------------------------------------------------- sort by duration


def test_the_sort_by_duration_is_exact_to_the_microsecond(alice):
    experiment = make_experiment(alice, "timed")
    start = datetime(2026, 12, 5, 6, 0, 0, tzinfo=UTC)
    spans = [  # (started, finished): durations 1 s + 1 us, 1 s, 59.999999 s, 3 days, running
        (start + timedelta(seconds=5), start + timedelta(seconds=6, microseconds=1)),
        (start, start + timedelta(seconds=1)),
        (start + timedelta(microseconds=1), start + timedelta(seconds=60)),
        (start - timedelta(days=3), start),
        (timezone.now() - timedelta(days=30), None),
    ]
    runs = [
        make_run(experiment, number=i + 1, started_at=s, finished_at=f)
        for i, (s, f) in enumerate(spans)
    ]
    client = session_client(alice)
    ids = [int(pk) for pk in re.findall(r'data-run-id="(\d+)"', client.get("/runs/?sort=duration").content.decode())]  # fmt: skip
    assert ids == [runs[i].pk for i in (1, 0, 2, 3, 4)]  # a tie would put 0 first
    ids = [int(pk) for pk in re.findall(r'data-run-id="(\d+)"', client.get("/runs/?sort=-duration").content.decode())]  # fmt: skip
    assert ids == [runs[i].pk for i in (4, 3, 2, 0, 1)]


# ---------------------------------------------------------------------- the filter's options


def test_the_filter_options_are_the_users_escaped_and_the_chosen_one_selected(alice):
    bob = make_user("bob")
    mine = make_experiment(alice, 'a<b & "c"')
    other = make_experiment(alice, "z-other")
    theirs = make_experiment(bob, "bob-secret")
    make_run(mine).tags.add(Tag.objects.create(name="mine<1>"))
    make_run(theirs).tags.add(Tag.objects.create(name="bobs-tag"))
    Tag.objects.create(name="unused")
    body = session_client(alice).get(f"/runs/?experiment={mine.pk}").content.decode()
    assert (
        f'<option value="{mine.pk}" selected>a&lt;b &amp; &quot;c&quot;</option>'
        f'<option value="{other.pk}">z-other</option></select>'
    ) in body
    assert '<option value="">all tags</option><option value="mine&lt;1&gt;">mine&lt;1&gt;</option></select>' in body  # fmt: skip
    assert "bob-secret" not in body and "bobs-tag" not in body and "unused" not in body
    body = session_client(alice).get("/runs/?tag=mine<1>").content.decode()
    assert '<option value="mine&lt;1&gt;" selected>' in body
    staff = session_client(make_user("root", staff=True)).get("/runs/").content.decode()
    assert "bobs-tag</option>" in staff and "unused" not in staff
