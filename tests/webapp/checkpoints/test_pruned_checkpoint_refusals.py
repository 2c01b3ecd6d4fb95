"""Checkpoint retention against Convert / Fork / Evaluate (issue 23): the trainer's retention
(``rft_core.checkpoint.retention.prune_checkpoints``, the demo's ``max_checkpoints_to_keep: 1``
plus the best by eval accuracy) deletes older step dirs; every checkpoint still on disk, the
retained best included, converts and forks; a pruned one is refused (409, or 400 beside the
evaluation's field) with a message naming ``trainer.max_checkpoints_to_keep``, through the web
and the API alike, and its row shows pruned without a Fork or Convert control."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from api_helpers import token_client
from demo_rows import audit, full_checkpoint, make_experiment, make_run

from webapp.checkpoints.actions import sync_checkpoints
from webapp.checkpoints.models import Checkpoint, Evaluation, HFStatus
from webapp.runs.live import checkpoint_state
from webapp.runs.models import Run, RunStatus

pytestmark = pytest.mark.django_db
BEST = "eval/arithmetic-eval/accuracy/mean@1"
REFUSAL = "it was pruned by checkpoint retention (trainer.max_checkpoints_to_keep: 1 keeps "
REFUSAL += f"the newest 1 of each stage and the best by {BEST})"


def _post(client, url: str, body=None):
    return client.post(url, json.dumps(body or {}), content_type="application/json")


def test_retention_leaves_the_best_and_the_newest_on_disk_and_the_rest_pruned(pruned_run):
    _, rows = pruned_run
    assert {s: c.pruned for s, c in rows.items()} == {10: False, 20: True, 30: False}
    # what the run page's checkpoint table draws from: the pruned flag (no Convert, no Fork)
    assert checkpoint_state(rows[20])["pruned"] is True
    assert checkpoint_state(rows[10])["pruned"] is False


def test_the_retained_best_converts_and_a_pruned_one_is_refused_naming_the_setting(
    alice, pruned_run
):
    _, rows = pruned_run
    api = token_client(alice)[0]
    best = _post(api, f"/api/v1/checkpoints/{rows[10].pk}/convert/")
    assert best.status_code == 202, best.content
    assert best.json()["hf_status"] == HFStatus.CONVERTING
    refused = _post(api, f"/api/v1/checkpoints/{rows[20].pk}/convert/")
    assert refused.status_code == 409
    assert refused.json()["detail"].startswith("cannot convert rft/global_step_20: ")
    assert REFUSAL in refused.json()["detail"]
    assert refused.json()["error_list"] == [{"path": "checkpoint", "message": REFUSAL + "; "
        "choose a checkpoint still on disk, or launch with a larger "
        "trainer.max_checkpoints_to_keep (0 keeps all)"}]  # fmt: skip
    # the run page's Convert (a fetch) and its form post say the same
    client = token_client(alice)[0]
    client.force_login(alice)
    page = client.post(f"/checkpoints/{rows[20].pk}/convert/", HTTP_ACCEPT="application/json")
    assert page.status_code == 409 and REFUSAL in page.json()["detail"]
    form = client.post(f"/checkpoints/{rows[20].pk}/convert/")
    assert form.status_code == 409
    assert "trainer.max_checkpoints_to_keep" in form.content.decode()
    rows[20].refresh_from_db()
    assert rows[20].hf_status == HFStatus.ABSENT
    assert [a.target_id for a in audit("checkpoint.convert")] == [str(rows[10].pk)]


def test_a_pruned_checkpoint_cannot_be_forked_by_the_page_or_the_api(
    alice, pruned_run, settings, ray_head
):
    settings.RAY_ADDRESS = ray_head.address
    run, rows = pruned_run
    api = token_client(alice)[0]
    refused = _post(api, f"/api/v1/checkpoints/{rows[20].pk}/fork/")
    assert refused.status_code == 409
    assert refused.json()["detail"].startswith("cannot fork from rft/global_step_20: ")
    assert REFUSAL in refused.json()["detail"]
    api.force_login(alice)
    page = api.get(f"/checkpoints/{rows[20].pk}/fork/")
    assert page.status_code == 409
    text = page.content.decode()
    assert "trainer.max_checkpoints_to_keep: 1" in text and 'id="fork-form"' not in text
    posted = api.post(f"/checkpoints/{rows[20].pk}/fork/", {"config_yaml": run.config_yaml})
    assert posted.status_code == 409
    assert Run.objects.count() == 1 and audit("run.fork") == []
    # the retained best forks
    best = _post(api, f"/api/v1/checkpoints/{rows[10].pk}/fork/")
    assert best.status_code == 201, best.content
    assert Run.objects.get(pk=best.json()["id"]).fork_step == 10


def test_a_pruned_checkpoint_is_not_offered_for_evaluation_and_is_refused(alice, pruned_run):
    run, rows = pruned_run
    api = token_client(alice)[0]
    body = {"checkpoints": [rows[10].pk, rows[20].pk], "tasksets": ["arithmetic-eval"]}
    refused = _post(api, f"/api/v1/runs/{run.pk}/evaluations/", body)
    assert refused.status_code == 400
    message = refused.json()["errors"]["checkpoints"]
    assert message == (
        "gone from disk, pruned by checkpoint retention (trainer.max_checkpoints_to_keep): "
        "rft/global_step_20"
    )
    assert Evaluation.objects.count() == 0
    api.force_login(alice)
    page = api.get(f"/runs/{run.pk}/evaluations/").content.decode()
    assert f'value="{rows[20].pk}"' not in page  # pruned: not offered at all, but counted
    assert 'id="pruned-note">' in page and "pruned checkpoint" in page
    assert f'value="{rows[10].pk}" data-stage="rft" data-step="10" >' in page


def test_a_step_dir_gone_before_its_row_knew_turns_pruned_when_refused(alice, pruned_run):
    _, rows = pruned_run
    shutil.rmtree(Path(rows[30].path))  # deleted since the last checkpoint event
    assert not Checkpoint.objects.get(pk=rows[30].pk).pruned
    refused = _post(token_client(alice)[0], f"/api/v1/checkpoints/{rows[30].pk}/convert/")
    assert refused.status_code == 409 and REFUSAL in refused.json()["detail"]
    assert Checkpoint.objects.get(pk=rows[30].pk).pruned


def test_a_run_without_retention_says_its_checkpoint_was_deleted_not_pruned(alice, roots):
    _, runs = roots
    experiment = make_experiment(alice)
    config = dict(experiment.config, trainer={**experiment.config["trainer"]})
    config["trainer"]["max_checkpoints_to_keep"] = 0
    job_dir = runs / "users" / str(alice.pk) / "checkpoints" / "run-1" / "demo" / "keep-all"
    run = make_run(experiment, status=RunStatus.SUCCEEDED, job_dir=str(job_dir), config=config)
    step = full_checkpoint(job_dir / "rft", 10)
    (checkpoint,) = sync_checkpoints(run)
    shutil.rmtree(step)
    refused = _post(token_client(alice)[0], f"/api/v1/checkpoints/{checkpoint.pk}/convert/")
    assert refused.status_code == 409
    assert refused.json()["detail"].endswith(
        "its directory was deleted (the run keeps every checkpoint, so not by retention)"
    )


def test_an_evaluations_best_checkpoint_pruned_since_shows_pruned_not_convert(alice, pruned_run):
    run, rows = pruned_run
    evaluation = Evaluation.objects.create(run=run, tasksets=["arithmetic-eval"])
    evaluation.checkpoints.set([rows[20], rows[30]])
    cell = {"metric": "accuracy/mean@1"}
    evaluation.results = {
        str(rows[20].pk): {"arithmetic-eval": {**cell, "value": 0.8}},  # the best, pruned since
        str(rows[30].pk): {"arithmetic-eval": {**cell, "value": 0.6}},
    }
    evaluation.save()
    client = token_client(alice)[0]
    client.force_login(alice)
    page = client.get(f"/runs/{run.pk}/evaluations/").content.decode()
    assert f'data-checkpoint="{rows[20].pk}" data-step="20" class="best"' in page
    assert '<span class="hf hf-pruned">pruned (trainer.max_checkpoints_to_keep)</span>' in page
    assert f"/checkpoints/{rows[20].pk}/convert/" not in page
