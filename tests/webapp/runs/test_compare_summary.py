"""The compare page's summary table and parallel-coordinates data
(``webapp/runs/compare_summary.py``): per run the last and best value of each key metric, the
best run of each column marked (the lowest for a loss-like name), in two queries whatever the
number of points; the steps of each stage apart; the chart's axes are the numeric config paths that differ plus the key
metrics' last values."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from webapp.experiments.models import Experiment
from webapp.runs.compare import config_flats
from webapp.runs.compare_summary import lower_is_better, parallel_coordinates, summary
from webapp.runs.models import MetricPoint, Run

pytestmark = pytest.mark.django_db

ACC = "eval/gsm8k/accuracy/mean@1"
REWARD = "rollout/reward/mean"
LENGTH_LOSS = "rollout/response_length_loss"  # not in the default group: no column


def _run(owner, number: int, yaml: str) -> Run:
    experiment, _ = Experiment.objects.get_or_create(
        owner=owner, name="sweep", defaults={"config_yaml": "", "config": {}}
    )
    return Run.objects.create(experiment=experiment, number=number, config_yaml=yaml)


def _points(run: Run, name: str, values: list[float | None]) -> None:
    MetricPoint.objects.bulk_create(
        MetricPoint(run=run, name=name, role="explorer", stage="rft", step=i + 1,
                    wall_time=1000.0 + i, value=v)
        for i, v in enumerate(values)
    )  # fmt: skip


@pytest.fixture
def sweep():
    alice = get_user_model().objects.create_user("alice", password=None)
    one = _run(alice, 1, "algorithm:\n  optimizer:\n    lr: 1.0e-05\nname: a\n")
    two = _run(alice, 2, "algorithm:\n  optimizer:\n    lr: 3.0e-05\nname: b\n")
    three = _run(alice, 3, "name: c\n")  # lr unset: the default applies
    _points(one, REWARD, [0.1, 0.9, 0.4])  # best 0.9, last 0.4
    _points(two, REWARD, [0.2, 0.5, 0.6])
    _points(three, REWARD, [None, 0.3])  # a NaN point counts for neither
    _points(one, ACC, [0.5, 0.7])
    _points(two, ACC, [0.8])
    _points(one, LENGTH_LOSS, [5.0, 1.0])
    return alice, [one, two, three]


def test_each_run_has_its_last_and_best_and_the_best_run_of_a_column_is_marked(sweep):
    _, runs = sweep
    with CaptureQueriesContext(connection) as queries:
        table = summary(runs)
    assert len(queries) == 2
    assert table.names == [ACC, REWARD]
    one, two, three = table.rows
    assert [(c.last, c.best, c.is_best) for c in one.cells] == [(0.7, 0.7, False), (0.4, 0.9, True)]
    assert [(c.last, c.best, c.is_best) for c in two.cells] == [(0.8, 0.8, True), (0.6, 0.6, False)]
    assert [(c.last, c.best) for c in three.cells] == [(None, None), (0.3, 0.3)]
    assert (one.stage_steps, two.stage_steps, three.stage_steps) == (
        [("rft", 3)],
        [("rft", 3)],
        [("rft", 2)],
    )


def test_the_steps_column_gives_each_stage_its_own_last_step(sweep):
    """A run of 450 SFT steps then 40 GRPO steps, and its fork from GRPO step 20 (which logs
    GRPO steps 21-40 only): the parent's steps read sft_warmup 450 and rft 40, the fork's rft
    40, never the parent's 450 beside the fork's 40."""
    alice, _ = sweep
    parent = _run(alice, 4, "name: d\n")
    fork = _run(alice, 5, "name: e\n")
    MetricPoint.objects.bulk_create(
        [MetricPoint(run=parent, name="actor/sft_loss", role="trainer", stage="sft_warmup",
                     step=s, wall_time=float(s), value=1.0 / s) for s in range(1, 451)]
        + [MetricPoint(run=run, name=REWARD, role="explorer", stage="rft", step=s,
                       wall_time=1000.0 + s, value=0.5) for run, first in ((parent, 1), (fork, 21))
           for s in range(first, 41)]
    )  # fmt: skip
    with CaptureQueriesContext(connection) as queries:
        table = summary([parent, fork])
    assert len(queries) == 2
    parent_row, fork_row = table.rows
    assert parent_row.stage_steps == [("sft_warmup", 450), ("rft", 40)]
    assert fork_row.stage_steps == [("rft", 40)]
    # a metric of two stages keeps one column: its last value is the newest stage's
    assert table.names == [REWARD] and parent_row.cells[0].last == 0.5


def test_the_query_count_does_not_grow_with_the_points(sweep):
    _, runs = sweep
    _points(runs[0], REWARD, [0.0] * 500)
    with CaptureQueriesContext(connection) as queries:
        table = summary(runs)
    assert len(queries) == 2 and table.rows[0].cells[1].last == 0.0


def test_loss_like_names_are_lower_is_better():
    assert lower_is_better("actor/pg_loss") and lower_is_better("actor/kl_loss")
    assert lower_is_better("rollout/response_length/mean")
    assert not lower_is_better(REWARD) and not lower_is_better(ACC)


def test_the_parallel_chart_has_the_differing_numeric_paths_and_the_metrics(sweep):
    _, runs = sweep
    table = summary(runs)
    data = parallel_coordinates(runs, table, config_flats(runs))
    assert data["runs"] == ["sweep #1", "sweep #2", "sweep #3"]
    labels = [d["label"] for d in data["dimensions"]]
    assert labels == ["algorithm.optimizer.lr", ACC, REWARD]  # name (text) is no axis
    assert data["dimensions"][0]["values"] == [1e-05, 3e-05, None]
    assert data["dimensions"][1]["values"] == [0.7, 0.8, None]
    assert data["dimensions"][2]["values"] == [0.4, 0.6, 0.3]


def test_the_compare_page_shows_the_summary_and_the_chart_data(client, sweep):
    alice, runs = sweep
    client.force_login(alice)
    response = client.get(f"/runs/compare/?ids={runs[0].pk},{runs[1].pk}")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="compare-summary"' in html and 'id="parallel-data"' in html
    assert (
        html.count('class="best"') == 2
    )  # run 1 holds the reward column's best, run 2 the accuracy's
