"""Evaluate checkpoints (``webapp.checkpoints.evaluation``, ``/runs/<id>/evaluations/``): the
action's refusals by field, the audited launch, the bench job's config and job dir, and the
checkpoint x taskset table read from the bench job's monitor record (best marked, Convert
beside it). The real bench job: tests/e2e/test_fork_and_evaluate.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from api_helpers import task_callbacks
from demo_rows import audit

from webapp.checkpoints.evaluation import (
    accuracy_table,
    bench_config,
    follow_evaluation,
    start_evaluation,
)
from webapp.checkpoints.models import Evaluation, EvaluationStatus

pytestmark = pytest.mark.django_db
ACC = "bench/arithmetic-eval/accuracy/mean@1"


def _post(client, run, checkpoints, tasksets):
    return client.post(
        f"/runs/{run.pk}/evaluations/",
        {"checkpoint": [c.pk for c in checkpoints], "taskset": tasksets},
    )


def test_it_refuses_each_bad_choice_beside_its_field_and_writes_nothing(
    client, alice, run_with_checkpoints
):
    run, (rft10, rft20, sft10) = run_with_checkpoints
    client.force_login(alice)
    page = _post(client, run, [], []).content.decode()
    assert 'id="error-checkpoints">choose at least one checkpoint' in page
    assert (
        "choose at least one of the run&#x27;s eval tasksets [&#x27;arithmetic-eval&#x27;]" in page
    )
    response = _post(client, run, [rft10, sft10], ["gsm8k"])
    assert response.status_code == 400
    page = response.content.decode()
    assert "choose checkpoints of one stage" in page
    assert "not eval tasksets of the run: [&#x27;gsm8k&#x27;]" in page
    assert Evaluation.objects.count() == 0 and audit("checkpoint.evaluate") == []


def test_another_users_run_cannot_be_evaluated(client, bob, run_with_checkpoints):
    run, (rft10, rft20, _) = run_with_checkpoints
    client.force_login(bob)
    assert client.get(f"/runs/{run.pk}/evaluations/").status_code == 403
    assert _post(client, run, [rft10, rft20], ["arithmetic-eval"]).status_code == 403
    assert Evaluation.objects.count() == 0


def test_an_evaluation_is_audited_and_its_bench_job_enqueued_on_commit(
    client, alice, run_with_checkpoints, settings, ray_head, django_capture_on_commit_callbacks
):
    settings.RAY_ADDRESS = ray_head.address
    run, (rft10, rft20, _) = run_with_checkpoints
    client.force_login(alice)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = _post(client, run, [rft10, rft20], ["arithmetic-eval"])
    evaluation = Evaluation.objects.get()
    assert response.status_code == 302
    assert response.url == f"/runs/{run.pk}/evaluations/#evaluation-{evaluation.pk}"
    assert evaluation.status == EvaluationStatus.QUEUED and evaluation.launched_by == alice
    assert sorted(c.step for c in evaluation.checkpoints.all()) == [10, 20]
    assert len(task_callbacks(callbacks)) == 1
    (row,) = audit("checkpoint.evaluate")
    assert row.actor_name == "alice" and row.after["tasksets"] == ["arithmetic-eval"]


def test_the_bench_job_is_the_runs_config_in_mode_bench_over_the_linked_checkpoints(
    alice, run_with_checkpoints, settings
):
    run, (rft10, rft20, _) = run_with_checkpoints
    data = bench_config(run, ["arithmetic-eval"])
    assert data["mode"] == "bench" and "stages" not in data
    assert data["explorer"]["bench_on_latest_checkpoint"] is False
    names = [t["name"] for t in data["buffer"]["explorer_input"]["eval_tasksets"]]
    assert names == ["arithmetic-eval"]
    evaluation = Evaluation.objects.create(run=run, tasksets=["arithmetic-eval"])
    evaluation.checkpoints.set([rft10, rft20])
    settings.RAY_ADDRESS = "http://127.0.0.1:9"  # nothing answers: the submission fails
    evaluation = start_evaluation(evaluation.pk)
    assert evaluation.status == EvaluationStatus.FAILED
    assert evaluation.error.startswith("the Ray job could not be submitted")
    # its job dir was prepared: the config, and the two checkpoints hard-linked
    root = next(Path(settings.RFT_RUNS_DIR).rglob(f"run-eval-{evaluation.pk}"))
    written = yaml.safe_load((root / "config.yaml").read_text())
    assert written["mode"] == "bench"
    job_dir = root / "demo" / "grpo_demo"
    assert sorted(p.name for p in job_dir.glob("global_step_*")) == [
        "global_step_10",
        "global_step_20",
    ]
    shard = "actor/model_world_size_1_rank_0.pt"
    assert (job_dir / "global_step_20" / shard).stat().st_ino == (
        Path(rft20.path) / shard
    ).stat().st_ino


def test_the_table_shows_each_checkpoints_accuracy_with_the_best_marked_and_convert_beside_it(
    client, alice, run_with_checkpoints, tmp_path, settings
):
    run, (rft10, rft20, _) = run_with_checkpoints
    job_dir = tmp_path / "bench"
    (job_dir / "monitor").mkdir(parents=True)
    lines = [
        {"step": 10, "time": 1.0, ACC: 0.25, "bench/arithmetic-eval/format/mean@1": 0.9},
        {"step": 20, "time": 2.0, ACC: 0.625},
    ]
    (job_dir / "monitor" / "explorer_metrics.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines)
    )
    evaluation = Evaluation.objects.create(
        run=run,
        tasksets=["arithmetic-eval"],
        status=EvaluationStatus.RUNNING,
        submission_id="rft-eval-gone",
        job_dir=str(job_dir),
    )
    evaluation.checkpoints.set([rft10, rft20])
    # Ray's job server does not answer: still running, asked again later
    settings.RAY_ADDRESS = "http://127.0.0.1:9"
    assert follow_evaluation(evaluation.pk) is True
    evaluation.refresh_from_db()
    assert evaluation.status == EvaluationStatus.RUNNING
    # read back from the record as the finished job's follow-up would
    from webapp.checkpoints.evaluation import read_results

    evaluation.results = read_results(evaluation)
    evaluation.status = EvaluationStatus.SUCCEEDED
    evaluation.save()
    assert evaluation.results == {
        str(rft10.pk): {"arithmetic-eval": {"metric": "accuracy/mean@1", "value": 0.25}},
        str(rft20.pk): {"arithmetic-eval": {"metric": "accuracy/mean@1", "value": 0.625}},
    }
    table = accuracy_table(evaluation)
    assert [(r["checkpoint"].step, r["cells"], r["best"]) for r in table.rows] == [
        (10, [0.25], False),
        (20, [0.625], True),
    ]
    client.force_login(alice)
    page = client.get(f"/runs/{run.pk}/evaluations/").content.decode()
    assert '<td class="accuracy">0.250</td>' in page and '<td class="accuracy">0.625</td>' in page
    best_row = page.split(f'data-checkpoint="{rft20.pk}"')[1].split("</tr>")[0]
    assert "★ best" in best_row and f"/checkpoints/{rft20.pk}/convert/" in best_row
    other_row = page.split(f'data-checkpoint="{rft10.pk}"')[1].split("</tr>")[0]
    assert "best" not in other_row and "convert" not in other_row
