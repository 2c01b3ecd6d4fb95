"""The evaluation page puts the run's own eval of each checkpoint's step beside the bench's
value, and says why they differ (issue 31: 0.820 against the run's 0.817 with no word why): a
run whose eval at step 20 ran before the explorer loaded step 20's weights measured model
version 19, and the page says so; an eval of the same weights with the same value needs no
note."""

from __future__ import annotations

import pytest

from webapp.checkpoints.evaluation import accuracy_table
from webapp.checkpoints.models import Evaluation, EvaluationStatus
from webapp.runs.models import MetricPoint

pytestmark = pytest.mark.django_db
ACC = "eval/arithmetic-eval/accuracy/mean@1"


def test_the_runs_own_eval_is_shown_with_the_reason_it_differs(client, alice, run_with_checkpoints):
    run, (rft10, rft20, _) = run_with_checkpoints
    points = [
        # step 10: logged by an explorer that names the version it evaluated (10: the same
        # weights as global_step_10) and found the bench's value
        (ACC, 10, 0.5),
        ("explorer/eval_model_version", 10, 10.0),
        # step 20: a run from before the fix: its eval ran on the weights step 20 explored
        # with, version 19, and found 0.817
        (ACC, 20, 0.817),
        ("explorer/model_version", 20, 19.0),
    ]
    MetricPoint.objects.bulk_create(
        MetricPoint(run=run, name=n, role="explorer", stage="rft", step=s, wall_time=1.0, value=v)
        for n, s, v in points
    )
    cell = {"metric": "accuracy/mean@1"}
    evaluation = Evaluation.objects.create(
        run=run,
        tasksets=["arithmetic-eval"],
        status=EvaluationStatus.SUCCEEDED,
        results={
            str(rft10.pk): {"arithmetic-eval": {**cell, "value": 0.5}},
            str(rft20.pk): {"arithmetic-eval": {**cell, "value": 0.82}},
        },
    )
    evaluation.checkpoints.set([rft10, rft20])
    table = accuracy_table(evaluation)
    assert [(r["checkpoint"].step, r["cells"], r["in_run"]) for r in table.rows] == [
        (10, [0.5], [0.5]),
        (20, [0.82], [0.817]),
    ]
    assert table.rows[0]["note"] == ""
    assert table.rows[1]["note"].startswith(
        "The run's own eval at step 20 measured model version 19 (the weights after trainer "
        "step 19), not global_step_20"
    )
    client.force_login(alice)
    page = client.get(f"/runs/{run.pk}/evaluations/").content.decode()
    row20 = page.split(f'data-checkpoint="{rft20.pk}"')[1].split("</tr>")[0]
    assert '<td class="accuracy">0.820</td>' in row20 and '<td class="in-run">0.817</td>' in row20
    note = page.split(f'data-note-for="{rft20.pk}"')[1].split("</tr>")[0]
    assert "measured model version 19" in note and "loaded global_step_20 itself" in note
    assert f'data-note-for="{rft10.pk}"' not in page
