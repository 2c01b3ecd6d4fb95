"""The admin of experiments, runs and checkpoints: lists with their columns, filters and search;
no direct writes of state (a run or checkpoint cannot be changed, added or deleted there), and
the changes it offers (edit an experiment's name/project/description/tags, delete it, cancel a
run, convert a checkpoint) go through the actions, audited under the admin user's name."""

from __future__ import annotations

from pathlib import Path

import pytest
from api_helpers import MINIMAL_YAML, make_experiment, make_run

from webapp.audit.models import AuditEvent
from webapp.checkpoints.models import Checkpoint, HFStatus
from webapp.experiments.models import Experiment, Tag
from webapp.runs.models import Run, RunStatus

pytestmark = pytest.mark.django_db


def experiment_of(owner, name: str, *, project: str = "math", tags=(), description: str = ""):
    """A row to look at (the admin tests are about the admin, not about creating)."""
    return make_experiment(owner, name, project=project, tags=tags, description=description)


def run_of(experiment, number: int = 1, status: str = RunStatus.SUCCEEDED, **fields) -> Run:
    run = make_run(experiment, number=number, status=status)
    if fields:
        Run.objects.filter(pk=run.pk).update(**fields)
        run.refresh_from_db()
    return run


def test_the_experiment_list_shows_owner_project_tags_version_and_last_run(client, root, alice):
    experiment = experiment_of(alice, "gsm8k-grpo", project="math", tags=["grpo", "qwen"])
    run_of(experiment, 3, RunStatus.FAILED)
    body = client.get("/admin/experiments/experiment/").content.decode()
    for text in ("gsm8k-grpo", "alice", "math", "grpo, qwen", "#3 failed"):
        assert text in body
    for heading in ("By project", "By owner", "By tags"):
        assert heading in body


def test_the_experiment_list_filters_and_searches(client, root, alice):
    experiment_of(alice, "alpha", project="math", description="countdown task")
    experiment_of(alice, "beta", project="code", tags=["sft"])
    names = lambda **q: {  # noqa: E731
        n for n in ("alpha", "beta") if f">{n}<" in client.get(_admin("experiment"), q).text
    }
    assert names(project__exact="math") == {"alpha"}
    assert names(tags__id__exact=_tag("sft")) == {"beta"}
    assert names(q="countdown") == {"alpha"}  # description
    assert names(q="code") == {"beta"}  # project
    assert names(q="alph") == {"alpha"}  # name


def test_the_experiment_page_shows_versions_read_only_and_offers_no_add(client, root, alice):
    experiment = experiment_of(alice, "alpha")
    experiment.versions.create(number=1, config_yaml=MINIMAL_YAML, note="first", author=alice)
    page = client.get(f"/admin/experiments/experiment/{experiment.pk}/change/").text
    assert "first" in page and "project: api-tests" in page
    assert 'name="versions-0-note"' not in page  # shown, not an input
    assert client.get("/admin/experiments/experiment/add/").status_code == 403


def test_the_run_list_shows_its_columns_and_filters_by_status(client, root, alice):
    experiment = experiment_of(alice, "alpha")
    run_of(experiment, 1, RunStatus.FAILED, submission_id="raysubmit_aaa", launched_by=alice)
    run_of(experiment, 2, RunStatus.SUCCEEDED, submission_id="raysubmit_bbb")
    body = client.get(_admin("run")).text
    assert "raysubmit_aaa" in body and "raysubmit_bbb" in body and "By status" in body
    failed = client.get(_admin("run"), {"status__exact": "failed"}).text
    assert "raysubmit_aaa" in failed and "raysubmit_bbb" not in failed
    assert "raysubmit_bbb" in client.get(_admin("run"), {"q": "raysubmit_bbb"}).text
    assert "raysubmit_aaa" not in client.get(_admin("run"), {"q": "raysubmit_bbb"}).text
    run = Run.objects.get(number=1)
    assert "raysubmit_aaa" in client.get(_admin("run"), {"q": run.key}).text


def test_it_refuses_to_change_add_or_delete_a_run_in_the_admin(client, root, alice):
    run = run_of(experiment_of(alice, "alpha"), 1, RunStatus.RUNNING, submission_id="raysubmit_x")
    url = f"/admin/runs/run/{run.pk}/"
    assert client.get(f"{url}change/").status_code == 200  # the view page
    assert client.post(f"{url}change/", {"status": "succeeded"}).status_code == 403
    assert client.post(f"{url}delete/", {"post": "yes"}).status_code == 403
    assert client.post("/admin/runs/run/add/", {"status": "running"}).status_code == 403
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING


def test_cancel_in_the_run_list_goes_through_cancel_run(client, root, alice):
    run = run_of(experiment_of(alice, "alpha"), 1, RunStatus.QUEUED)
    response = client.post(
        _admin("run"), {"action": "cancel_through_action", "_selected_action": [run.pk]}
    )
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    row = AuditEvent.objects.get(action="run.cancel")
    assert (row.actor_name, row.target_type, row.target_id) == ("root", "run", str(run.pk))


def test_cancel_of_a_finished_run_in_the_admin_says_why_and_changes_nothing(client, root, alice):
    run = run_of(experiment_of(alice, "alpha"), 1, RunStatus.SUCCEEDED)
    response = client.post(
        _admin("run"),
        {"action": "cancel_through_action", "_selected_action": [run.pk]},
        follow=True,
    )
    assert "has already succeeded" in response.text
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert not AuditEvent.objects.filter(action="run.cancel").exists()


def test_the_checkpoint_list_filters_by_hf_status_and_refuses_changes(client, root, alice):
    run = run_of(experiment_of(alice, "alpha"))
    ready = Checkpoint.objects.create(
        run=run, step=10, path="/x/global_step_10", size_bytes=3 * 2**20, hf_status=HFStatus.READY
    )
    Checkpoint.objects.create(run=run, step=20, path="/x/global_step_20")
    body = client.get(_admin("checkpoint")).text
    assert "3.0" in body and "MB" in body and "By hf status" in body
    only_ready = client.get(_admin("checkpoint"), {"hf_status__exact": "ready"}).text
    assert only_ready.count("global_step_") < body.count("global_step_")
    url = f"/admin/checkpoints/checkpoint/{ready.pk}/"
    assert client.post(f"{url}change/", {"hf_status": "absent"}).status_code == 403
    assert client.post(f"{url}delete/", {"post": "yes"}).status_code == 403
    ready.refresh_from_db()
    assert ready.hf_status == HFStatus.READY


def test_convert_in_the_checkpoint_list_goes_through_convert_checkpoint(
    client, root, alice, tmp_path: Path
):
    job_dir = tmp_path / "job"
    step_dir = job_dir / "global_step_10"
    (step_dir / "actor").mkdir(parents=True)
    run = run_of(experiment_of(alice, "alpha"), job_dir=str(job_dir))
    checkpoint = Checkpoint.objects.create(run=run, step=10, path=str(step_dir))
    response = client.post(
        _admin("checkpoint"),
        {"action": "convert_through_action", "_selected_action": [checkpoint.pk]},
    )
    assert response.status_code == 302
    checkpoint.refresh_from_db()
    assert checkpoint.hf_status == HFStatus.CONVERTING
    row = AuditEvent.objects.get(action="checkpoint.convert")
    assert (row.actor_name, row.target_id) == ("root", str(checkpoint.pk))


def test_the_admin_is_closed_to_a_user_who_is_not_staff(client, alice):
    client.force_login(alice)
    for model in ("experiment", "run", "checkpoint"):
        assert client.get(_admin(model)).status_code == 302  # to the admin login


def _admin(model: str) -> str:
    app = {"experiment": "experiments", "run": "runs", "checkpoint": "checkpoints"}[model]
    return f"/admin/{app}/{model}/"


def _tag(name: str) -> int:
    return Tag.objects.get(name=name).pk


def _change_post(experiment: Experiment, **fields) -> dict:
    versions = experiment.versions.count()
    return {
        "name": experiment.name,
        "project": experiment.project,
        "description": experiment.description,
        "tags": [t.pk for t in experiment.tags.all()],
        "versions-TOTAL_FORMS": versions,
        "versions-INITIAL_FORMS": versions,
        "versions-MIN_NUM_FORMS": 0,
        "versions-MAX_NUM_FORMS": 1000,
        **{f"versions-{i}-id": v.pk for i, v in enumerate(experiment.versions.all())},
        **{f"versions-{i}-experiment": experiment.pk for i in range(versions)},
        **fields,
    }


def test_an_admin_edit_goes_through_update_experiment_and_is_audited(client, root, alice):
    experiment = experiment_of(alice, "alpha", tags=["old"])
    experiment.versions.create(number=1, config_yaml=MINIMAL_YAML, author=alice)
    new_tag = Tag.objects.create(name="new")
    response = client.post(
        f"/admin/experiments/experiment/{experiment.pk}/change/",
        _change_post(experiment, name="renamed", project="p2", tags=[new_tag.pk]),
    )
    assert response.status_code == 302, response.content[-3000:]
    experiment.refresh_from_db()
    assert (experiment.name, experiment.project) == ("renamed", "p2")
    assert [t.name for t in experiment.tags.all()] == ["new"]
    assert experiment.config_yaml == MINIMAL_YAML and experiment.version == 1
    row = AuditEvent.objects.get(action="experiment.update")
    assert (row.actor_name, row.target_id) == ("root", str(experiment.pk))
    assert row.before["name"] == "alpha" and row.after["name"] == "renamed"


def test_an_admin_edit_the_action_refuses_saves_nothing_and_says_why(client, root, alice):
    experiment_of(alice, "taken")
    experiment = experiment_of(alice, "alpha")
    response = client.post(
        f"/admin/experiments/experiment/{experiment.pk}/change/",
        _change_post(experiment, name="taken", project="p2"),
        follow=True,
    )
    assert "Not saved" in response.text and "already have an experiment named" in response.text
    experiment.refresh_from_db()
    assert (experiment.name, experiment.project) == ("alpha", "math")
    assert not AuditEvent.objects.filter(action="experiment.update").exists()


def test_the_config_and_owner_cannot_be_changed_in_the_admin(client, root, alice):
    experiment = experiment_of(alice, "alpha")
    client.post(
        f"/admin/experiments/experiment/{experiment.pk}/change/",
        _change_post(experiment, config_yaml="project: x\n", owner=root.pk, version=9),
    )
    experiment.refresh_from_db()
    assert experiment.config_yaml == MINIMAL_YAML
    assert (experiment.owner_id, experiment.version) == (alice.pk, 1)


def test_an_admin_delete_goes_through_delete_experiment(client, root, alice):
    experiment = experiment_of(alice, "alpha")
    response = client.post(
        f"/admin/experiments/experiment/{experiment.pk}/delete/", {"post": "yes"}
    )
    assert response.status_code == 302
    assert not Experiment.objects.filter(pk=experiment.pk).exists()
    row = AuditEvent.objects.get(action="experiment.delete")
    assert (row.actor_name, row.target_id) == ("root", str(experiment.pk))


def test_an_admin_delete_of_an_experiment_with_an_active_run_is_refused(client, root, alice):
    experiment = experiment_of(alice, "alpha")
    run_of(experiment, 1, RunStatus.RUNNING)
    response = client.post(
        f"/admin/experiments/experiment/{experiment.pk}/delete/", {"post": "yes"}, follow=True
    )
    assert "Not deleted" in response.text and "cancel it before deleting" in response.text
    assert Experiment.objects.filter(pk=experiment.pk).exists()
    bulk = client.post(
        _admin("experiment"),
        {"action": "delete_through_action", "_selected_action": [experiment.pk]},
        follow=True,
    )
    assert "Not deleted" in bulk.text
    assert Experiment.objects.filter(pk=experiment.pk).exists()
    assert not AuditEvent.objects.filter(action="experiment.delete").exists()


def test_the_admin_bulk_delete_deletes_through_the_action(client, root, alice):
    ids = [experiment_of(alice, name).pk for name in ("a", "b")]
    assert b"delete_selected" not in client.get(_admin("experiment")).content
    client.post(_admin("experiment"), {"action": "delete_through_action", "_selected_action": ids})
    assert not Experiment.objects.filter(pk__in=ids).exists()
    rows = AuditEvent.objects.filter(action="experiment.delete")
    assert sorted(int(r.target_id) for r in rows) == sorted(ids)
