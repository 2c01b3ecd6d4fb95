"""webapp.runs.telemetry: metric events -> MetricPoint rows and the run's eval accuracy; log
events -> LogLine rows. Events are RunEvent rows as the ingestor stores them."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model

from webapp.events.models import RunEvent
from webapp.experiments.models import Experiment
from webapp.runs.models import LogLine, MetricPoint, Run
from webapp.runs.telemetry import eval_accuracy, record_logs, record_metrics

pytestmark = pytest.mark.django_db

T0 = 1_733_150_000.25


@pytest.fixture
def run():
    owner = get_user_model().objects.create_user("alice", password=None)
    experiment = Experiment.objects.create(owner=owner, name="e", config_yaml="", config={})
    return Run.objects.create(experiment=experiment, number=1, config_yaml="")


def _event(kind: str, payload: dict, *, step=None, role="explorer", stage="", ts=T0) -> RunEvent:
    return RunEvent(
        run_key="k",
        stream_id=f"{ts}-0",
        kind=kind,
        role=role,
        stage=stage,
        step=step,
        payload=payload,
        emitted_at=datetime.fromtimestamp(ts, tz=UTC),
    )


def test_it_writes_one_point_per_metric_name_with_role_stage_step_and_time(run):
    record_metrics(
        run,
        [
            _event("metric", {"rollout/reward/mean": 0.5, "response_length/mean": 17.0}, step=3),
            _event("metric", {"actor/pg_loss": -0.125}, step=3, role="trainer", stage="rft"),
        ],
    )
    rows = list(MetricPoint.objects.filter(run=run).order_by("id"))
    assert [(p.name, p.role, p.stage, p.step, p.value) for p in rows] == [
        ("rollout/reward/mean", "explorer", "", 3, 0.5),
        ("response_length/mean", "explorer", "", 3, 17.0),
        ("actor/pg_loss", "trainer", "rft", 3, -0.125),
    ]
    assert rows[0].wall_time == T0


def test_it_stores_nan_and_infinity_as_null(run):
    record_metrics(
        run, [_event("metric", {"a": math.nan, "b": math.inf, "c": None, "d": "x", "e": 1}, step=1)]
    )
    values = dict(MetricPoint.objects.filter(run=run).values_list("name", "value"))
    assert values == {"a": None, "b": None, "c": None, "d": None, "e": 1.0}


def test_it_keeps_the_last_and_the_best_eval_accuracy(run):
    # k=4: eval_metrics also emits std@4 and pass@4, which are not the accuracy
    record_metrics(
        run,
        [
            _event(
                "metric",
                {"eval/gsm8k/accuracy/mean@4": 0.25, "eval/gsm8k/accuracy/pass@4": 1.0},
                step=0,
            ),
            _event(
                "metric",
                {"eval/gsm8k/accuracy/mean@4": 0.75, "eval/gsm8k/accuracy/std@4": 0.4},
                step=4,
            ),
        ],
    )
    run.refresh_from_db()
    assert (run.last_eval_accuracy, run.best_eval_accuracy) == (0.75, 0.75)
    # a later, worse eval: last follows it, best stays
    record_metrics(run, [_event("metric", {"eval/gsm8k/accuracy/mean@4": 0.5}, step=8)])
    run.refresh_from_db()
    assert (run.last_eval_accuracy, run.best_eval_accuracy) == (0.5, 0.75)


def test_eval_accuracy_averages_tasksets_and_ignores_other_metrics():
    assert eval_accuracy({"eval/a/accuracy/mean@1": 0.5, "eval/b/accuracy/mean@1": 1.0}) == 0.75
    assert eval_accuracy({"rollout/accuracy/mean": 0.9, "bench/a/accuracy/mean@1": 0.9}) is None
    assert eval_accuracy({"eval/a/format_score/mean@1": 0.1}) is None
    assert eval_accuracy({"eval/a/accuracy/mean@1": math.nan}) is None


def test_metrics_without_eval_leave_the_accuracy_unset(run):
    record_metrics(run, [_event("metric", {"rollout/accuracy/mean": 0.9}, step=1)])
    run.refresh_from_db()
    assert (run.last_eval_accuracy, run.best_eval_accuracy) == (None, None)


def test_it_writes_log_lines_with_actor_level_and_stage(run):
    record_logs(
        run,
        [
            _event("log", {"level": "INFO", "text": "explorer step 1"}, role="explorer"),
            _event("log", {"level": "WARNING", "text": "slow"}, role="trainer", stage="rft"),
        ],
    )
    lines = LogLine.objects.filter(run=run).order_by("id")
    assert [(ln.actor, ln.level, ln.stage, ln.text) for ln in lines] == [
        ("explorer", "INFO", "", "explorer step 1"),
        ("trainer", "WARNING", "rft", "slow"),
    ]
