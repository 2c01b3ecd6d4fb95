"""The API writes what the run page writes (issue 23): a run's tags and notes
(``PATCH /api/v1/runs/<id>/``), a fork from a checkpoint (``POST /api/v1/checkpoints/<id>/fork/``)
and an evaluation of checkpoints (``/api/v1/runs/<id>/evaluations/``), each through the same
action as the page (the same audit rows), another user's run or checkpoint answered as a missing
one (404, audited) as on every API endpoint,
bad input a 400 with ``{path, message}`` errors and nothing written."""

from __future__ import annotations

import json

import pytest
from api_helpers import token_client
from demo_rows import audit

from webapp.audit.models import AuditEvent
from webapp.checkpoints.models import Evaluation, EvaluationStatus
from webapp.experiments.config_policy import parse_yaml
from webapp.runs.models import Run, RunStatus

pytestmark = pytest.mark.django_db


def _send(api, method: str, url: str, body=None):
    data = json.dumps(body if body is not None else {})
    return api.generic(method, url, data, content_type="application/json")


def _paths(response) -> list[str]:
    return [e["path"] for e in response.json()["error_list"]]


# ---------------------------------------------------------------- tags and notes


def test_the_owner_writes_tags_and_notes_audited_as_the_run_page_does(alice, parent):
    run, _ = parent
    api = token_client(alice)[0]
    response = _send(
        api, "PATCH", f"/api/v1/runs/{run.pk}/", {"tags": ["lr-sweep", " best ", "lr-sweep"]}
    )
    assert response.status_code == 200, response.content
    assert response.json()["tags"] == ["best", "lr-sweep"]  # trimmed, unique, sorted
    response = _send(api, "PATCH", f"/api/v1/runs/{run.pk}/", {"notes": "diverged at 40\r\n"})
    assert response.status_code == 200 and response.json()["notes"] == "diverged at 40\n"
    assert response.json()["tags"] == ["best", "lr-sweep"]  # untouched by a notes-only PATCH
    (tags,) = audit("run.tags")
    assert tags.actor_name == "alice" and tags.target_id == str(run.pk)
    assert (tags.before, tags.after) == ({"tags": []}, {"tags": ["best", "lr-sweep"]})
    (notes,) = audit("run.notes")
    assert (notes.before, notes.after) == ({"notes": ""}, {"notes": "diverged at 40\n"})
    run.refresh_from_db()
    assert run.notes == "diverged at 40\n"
    assert sorted(t.name for t in run.tags.all()) == ["best", "lr-sweep"]


def test_another_users_run_is_a_404_and_keeps_its_tags_and_notes(alice, bob, parent):
    run, _ = parent
    api = token_client(bob)[0]
    response = _send(api, "PATCH", f"/api/v1/runs/{run.pk}/", {"tags": ["mine"], "notes": "x"})
    assert response.status_code == 404
    assert response.json()["detail"] == f"no run {run.pk}"
    run.refresh_from_db()
    assert run.notes == "" and not run.tags.exists()
    assert audit("run.tags") == [] and audit("run.notes") == []
    (denied,) = audit("permission.denied")
    assert denied.actor_name == "bob" and denied.after == {"attempted": "run.tags"}
    # a missing run answers the same
    assert _send(api, "PATCH", "/api/v1/runs/999999/", {"notes": "x"}).status_code == 404


@pytest.mark.parametrize(
    "body, path, words",
    [
        ({}, "non_field_errors", "nothing to update"),
        ({"tags": "a,b"}, "tags", "list"),
        ({"notes": ["x"]}, "notes", "valid string"),
        ({"tags": [f"t{i}" for i in range(21)]}, "tags", "at most 20 tags (21 given)"),
        ({"tags": ["x" * 65]}, "tags", "at most 64 characters"),
        ({"notes": "n" * 20_001}, "notes", "at most 20,000 characters (20,001 given)"),
        # both or neither: the good tags are not written when the notes are refused
        ({"tags": ["good"], "notes": "n" * 20_001}, "notes", "at most 20,000"),
    ],
)
def test_bad_tags_or_notes_are_a_400_naming_the_field_and_write_nothing(
    alice,
    parent,
    body,
    path,
    words,
):
    run, _ = parent
    response = _send(token_client(alice)[0], "PATCH", f"/api/v1/runs/{run.pk}/", body)
    assert response.status_code == 400, response.content
    assert _paths(response) == [path]
    assert words in response.json()["error_list"][0]["message"]
    run.refresh_from_db()
    assert run.notes == "" and not run.tags.exists()
    assert audit("run.tags") == [] and audit("run.notes") == []


# ---------------------------------------------------------------- fork


def test_the_api_forks_a_run_from_a_checkpoint_through_fork_run(
    alice,
    parent,
    settings,
    ray_head,
):
    settings.RAY_ADDRESS = ray_head.address
    run, checkpoint = parent
    config = parse_yaml(run.config_yaml)
    config["continue_from_checkpoint"] = True
    config["algorithm"]["optimizer"]["lr"] = 1e-6
    api = token_client(alice)[0]
    response = _send(api, "POST", f"/api/v1/checkpoints/{checkpoint.pk}/fork/", {"config": config})
    assert response.status_code == 201, response.content
    body = response.json()
    fork = Run.objects.get(pk=body["id"])
    assert body["number"] == 2 and body["status"] == RunStatus.QUEUED
    assert (fork.parent_id, fork.fork_stage, fork.fork_step) == (run.pk, "rft", 20)
    assert fork.config["algorithm"]["optimizer"]["lr"] == 1e-6
    (row,) = audit("run.fork")
    assert row.actor_name == "alice" and row.after["checkpoint"] == checkpoint.pk
    # no config: the parent's own, resuming
    response = _send(api, "POST", f"/api/v1/checkpoints/{checkpoint.pk}/fork/")
    assert response.status_code == 201, response.content
    second = Run.objects.get(pk=response.json()["id"])
    assert second.number == 3 and second.config["continue_from_checkpoint"] is True
    assert (
        second.config["algorithm"]["optimizer"]["lr"] == run.config["algorithm"]["optimizer"]["lr"]
    )


def test_a_fork_with_bad_input_is_a_400_by_path_and_writes_nothing(alice, parent):
    run, checkpoint = parent
    api = token_client(alice)[0]
    url = f"/api/v1/checkpoints/{checkpoint.pk}/fork/"
    text = run.config_yaml.replace("batch_size: 8", "batch_size: -4")
    text = text.replace("continue_from_checkpoint: false", "continue_from_checkpoint: true")
    response = _send(api, "POST", url, {"config_yaml": text})
    assert response.status_code == 400, response.content
    assert "buffer.batch_size" in _paths(response)
    both = _send(api, "POST", url, {"config_yaml": run.config_yaml, "config": {}})
    assert both.status_code == 400 and _paths(both) == ["config"]
    fresh = parse_yaml(run.config_yaml)
    fresh["continue_from_checkpoint"] = False
    response = _send(api, "POST", url, {"config": fresh})
    assert response.status_code == 400 and _paths(response) == ["continue_from_checkpoint"]
    assert Run.objects.count() == 1 and audit("run.fork") == []


def test_another_users_checkpoint_cannot_be_forked_through_the_api(alice, bob, parent):
    _, checkpoint = parent
    response = _send(token_client(bob)[0], "POST", f"/api/v1/checkpoints/{checkpoint.pk}/fork/")
    assert (
        response.status_code == 404
        and response.json()["detail"] == f"no checkpoint {checkpoint.pk}"
    )
    assert Run.objects.count() == 1 and audit("run.fork") == []
    assert audit("permission.denied")[-1].after == {"attempted": "run.fork"}


# ---------------------------------------------------------------- evaluate


def test_the_api_evaluates_checkpoints_through_evaluate_checkpoints(
    alice,
    run_with_checkpoints,
    settings,
    ray_head,
):
    settings.RAY_ADDRESS = ray_head.address
    run, (rft10, rft20, _) = run_with_checkpoints
    api = token_client(alice)[0]
    url = f"/api/v1/runs/{run.pk}/evaluations/"
    body = {"checkpoints": [rft20.pk, rft10.pk], "tasksets": ["arithmetic-eval"]}
    response = _send(api, "POST", url, body)
    assert response.status_code == 201, response.content
    made = response.json()
    evaluation = Evaluation.objects.get(pk=made["id"])
    assert made["status"] == EvaluationStatus.QUEUED and made["tasksets"] == ["arithmetic-eval"]
    assert sorted(made["checkpoints"]) == sorted([rft10.pk, rft20.pk])
    assert evaluation.launched_by == alice
    (row,) = audit("checkpoint.evaluate")
    assert row.after["checkpoints"] == sorted([rft10.pk, rft20.pk])
    # the results, once the bench job wrote them, read back from the list
    value = {"metric": "accuracy/mean@1", "value": 0.75}
    Evaluation.objects.filter(pk=evaluation.pk).update(
        status=EvaluationStatus.SUCCEEDED, results={str(rft20.pk): {"arithmetic-eval": value}}
    )
    listed = api.get(url).json()
    assert listed["count"] == 1
    assert listed["results"][0]["results"] == {str(rft20.pk): {"arithmetic-eval": value}}


def test_bad_evaluation_choices_are_a_400_by_field_and_write_nothing(
    alice,
    bob,
    run_with_checkpoints,
):
    run, (rft10, _, sft10) = run_with_checkpoints
    api = token_client(alice)[0]
    url = f"/api/v1/runs/{run.pk}/evaluations/"
    response = _send(api, "POST", url, {"checkpoints": [rft10.pk, 999999], "tasksets": ["x"]})
    assert response.status_code == 400 and _paths(response) == ["checkpoints"]
    assert "not checkpoints of run #1: [999999]" in response.json()["detail"]
    response = _send(api, "POST", url, {"checkpoints": [rft10.pk, sft10.pk], "tasksets": ["x"]})
    assert response.status_code == 400
    assert _paths(response) == ["checkpoints", "tasksets"]
    assert "one stage" in response.json()["errors"]["checkpoints"]
    assert "not eval tasksets of the run: ['x']" in response.json()["errors"]["tasksets"]
    response = _send(api, "POST", url, {"checkpoints": "all"})
    assert response.status_code == 400 and set(_paths(response)) == {"checkpoints", "tasksets"}
    assert Evaluation.objects.count() == 0 and audit("checkpoint.evaluate") == []
    other = _send(token_client(bob)[0], "POST", url, {"checkpoints": [rft10.pk], "tasksets": ["x"]})
    assert other.status_code == 404 and Evaluation.objects.count() == 0
    assert audit("permission.denied")[-1].after == {"attempted": "checkpoint.evaluate"}


def test_the_schema_documents_the_new_writes(alice):
    api = token_client(alice)[0]
    paths = api.get("/api/v1/schema/?format=json").json()["paths"]
    assert "patch" in paths["/api/v1/runs/{id}/"]
    assert set(paths["/api/v1/runs/{id}/evaluations/"]) >= {"get", "post"}
    assert "post" in paths["/api/v1/checkpoints/{id}/fork/"]
    patch = paths["/api/v1/runs/{id}/"]["patch"]
    assert set(patch["responses"]) == {"200", "400", "404"}
    assert AuditEvent.objects.filter(action="permission.denied").count() == 0
