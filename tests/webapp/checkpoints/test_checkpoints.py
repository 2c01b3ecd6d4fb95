"""webapp.checkpoints: rows from checkpoint events and the job dir tree, and the convert action
and page (access, audit, refusals). The conversion itself runs in a real Celery worker in
tests/workers/test_convert_task.py."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from api_helpers import task_callbacks
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.test import Client

from webapp.audit.models import AuditEvent
from webapp.audit.record import Actor
from webapp.checkpoints.actions import (
    CONVERT_STALE_AFTER,
    convert_checkpoint,
    observe_checkpoint,
    sync_checkpoints,
)
from webapp.checkpoints.models import Checkpoint, HFStatus
from webapp.errors import ActionError
from webapp.experiments.models import Experiment
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


def _step(job: Path, n: int, *, full: bool = True, hf_weights: bool = False) -> Path:
    """A step dir as the trainer writes it: shards, hf config; weights only if ``hf_weights``;
    a weight-sync dir (``full=False``) has neither marker nor huggingface/."""
    step = job / f"global_step_{n}"
    (step / "actor").mkdir(parents=True)
    (step / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"w" * 100)
    if full:
        (step / ".full_checkpoint").write_text(f"{n}\n")
        (step / "actor" / "huggingface").mkdir()
        (step / "actor" / "huggingface" / "config.json").write_text("{}")
    if hf_weights:
        (step / "actor" / "huggingface" / "model.safetensors").write_bytes(b"s" * 10)
    return step


@pytest.fixture
def run(alice, tmp_path):
    experiment = Experiment.objects.create(owner=alice, name="e", config_yaml="", config={})
    job = tmp_path / "run-1" / "proj" / "demo"
    job.mkdir(parents=True)
    return Run.objects.create(experiment=experiment, number=1, config_yaml="", job_dir=str(job))


def test_a_checkpoint_event_makes_one_row_with_size_and_hf_state(run):
    step = _step(Path(run.job_dir), 2, hf_weights=True)
    first = observe_checkpoint(run, stage="", step=2, path=str(step))
    again = observe_checkpoint(run, stage="", step=2, path=str(step))
    assert first.pk == again.pk and Checkpoint.objects.count() == 1
    # 100 (shard) + 2 (marker "2\n") + 2 (config "{}") + 10 (weights)
    assert again.size_bytes == 114
    assert (again.hf_status, again.hf_path) == (
        HFStatus.READY,
        str(step / "actor" / "huggingface"),
    )


def test_a_step_without_hf_weights_is_absent(run):
    step = _step(Path(run.job_dir), 4)
    assert observe_checkpoint(run, stage="", step=4, path=str(step)).hf_status == HFStatus.ABSENT


def test_sync_reads_every_stage_and_skips_weight_sync_dirs(run):
    job = Path(run.job_dir)
    (job / "monitor").mkdir()
    _step(job / "sft_warmup", 5, hf_weights=True)
    _step(job / "rft", 1)
    _step(job / "rft", 2, full=False)  # weight sync only: not a checkpoint
    _step(job / "rft", 3)
    rows = sync_checkpoints(run)
    assert [(c.stage, c.step, c.hf_status) for c in rows] == [
        ("rft", 1, HFStatus.ABSENT),
        ("rft", 3, HFStatus.ABSENT),
        ("sft_warmup", 5, HFStatus.READY),
    ]
    assert [c.pk for c in sync_checkpoints(run)] == [c.pk for c in rows]
    assert Checkpoint.objects.filter(run=run).count() == 3


def test_sync_of_a_run_without_a_job_dir_is_empty(run):
    run.job_dir = ""
    assert sync_checkpoints(run) == []


def test_convert_marks_it_converting_audits_and_enqueues_on_commit(
    run, alice, django_capture_on_commit_callbacks
):
    checkpoint = observe_checkpoint(run, stage="", step=2, path=str(_step(Path(run.job_dir), 2)))
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        converted = convert_checkpoint(Actor(user=alice, ip="10.0.0.1"), checkpoint)
    assert len(task_callbacks(callbacks)) == 1
    assert (converted.hf_status, converted.hf_progress) == (HFStatus.CONVERTING, 0.0)
    audit = AuditEvent.objects.get(action="checkpoint.convert")
    assert (audit.actor_name, audit.target_type, audit.target_id, audit.ip) == (
        "alice",
        "checkpoint",
        str(checkpoint.pk),
        "10.0.0.1",
    )
    assert audit.before == {"hf_status": "absent"}
    assert audit.after["hf_status"] == "converting"


def test_it_refuses_to_convert_while_converting(run, alice, django_capture_on_commit_callbacks):
    checkpoint = observe_checkpoint(run, stage="", step=2, path=str(_step(Path(run.job_dir), 2)))
    with django_capture_on_commit_callbacks(execute=False):
        convert_checkpoint(Actor(user=alice), checkpoint)
    with pytest.raises(ActionError, match="is being converted already") as refused:
        convert_checkpoint(Actor(user=alice), checkpoint)
    assert refused.value.status == 409
    assert AuditEvent.objects.filter(action="checkpoint.convert").count() == 1


def test_a_conversion_without_progress_for_long_may_be_started_again(
    run, alice, django_capture_on_commit_callbacks
):
    checkpoint = observe_checkpoint(run, stage="", step=2, path=str(_step(Path(run.job_dir), 2)))
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        convert_checkpoint(Actor(user=alice), checkpoint)
        # its worker was killed: no progress written since
        long_ago = checkpoint.updated - CONVERT_STALE_AFTER - timedelta(seconds=1)
        Checkpoint.objects.filter(pk=checkpoint.pk).update(updated=long_ago)
        convert_checkpoint(Actor(user=alice), checkpoint)
    assert len(task_callbacks(callbacks)) == 2


def test_it_refuses_to_convert_a_step_dir_that_is_gone(run, alice):
    checkpoint = Checkpoint.objects.create(
        run=run, stage="", step=7, path=str(Path(run.job_dir) / "global_step_7")
    )
    with pytest.raises(ActionError, match="global_step_7 is gone from disk") as refused:
        convert_checkpoint(Actor(user=alice), checkpoint)
    assert refused.value.status == 409
    assert Checkpoint.objects.get(pk=checkpoint.pk).hf_status == HFStatus.ABSENT


def test_it_refuses_a_step_dir_outside_the_runs_job_dir(run, alice, tmp_path):
    elsewhere = _step(tmp_path / "other-job", 3)
    checkpoint = Checkpoint.objects.create(run=run, stage="", step=3, path=str(elsewhere))
    with pytest.raises(ActionError, match="outside the run's job dir"):
        convert_checkpoint(Actor(user=alice), checkpoint)


def test_another_users_convert_is_refused_and_audited(run):
    bob = get_user_model().objects.create_user("bob", password=None)
    checkpoint = observe_checkpoint(run, stage="", step=2, path=str(_step(Path(run.job_dir), 2)))
    with pytest.raises(PermissionDenied):
        convert_checkpoint(Actor(user=bob), checkpoint)
    denied = AuditEvent.objects.get(action="permission.denied")
    assert (denied.actor_name, denied.target_id, denied.after) == (
        "bob",
        str(checkpoint.pk),
        {"attempted": "checkpoint.convert"},
    )
    assert Checkpoint.objects.get(pk=checkpoint.pk).hf_status == HFStatus.ABSENT


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_convert_page_queues_and_goes_back_to_the_run(
    run, alice, django_capture_on_commit_callbacks
):
    checkpoint = observe_checkpoint(run, stage="", step=2, path=str(_step(Path(run.job_dir), 2)))
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = _client(alice).post(f"/checkpoints/{checkpoint.pk}/convert/")
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
    assert len(task_callbacks(callbacks)) == 1
    assert Checkpoint.objects.get(pk=checkpoint.pk).hf_status == HFStatus.CONVERTING


def test_the_convert_page_answers_another_user_403_and_audits(run):
    bob = get_user_model().objects.create_user("bob", password=None)
    checkpoint = observe_checkpoint(run, stage="", step=2, path=str(_step(Path(run.job_dir), 2)))
    response = _client(bob).post(f"/checkpoints/{checkpoint.pk}/convert/")
    assert response.status_code == 403
    assert AuditEvent.objects.filter(action="permission.denied", actor_name="bob").count() == 1
    assert Checkpoint.objects.get(pk=checkpoint.pk).hf_status == HFStatus.ABSENT


def test_the_convert_page_shows_a_refusal_as_409_with_the_message(run, alice):
    checkpoint = Checkpoint.objects.create(
        run=run, stage="", step=9, path=str(Path(run.job_dir) / "global_step_9")
    )
    response = _client(alice).post(f"/checkpoints/{checkpoint.pk}/convert/")
    assert response.status_code == 409
    assert b"global_step_9 is gone from disk" in response.content


def test_the_convert_page_refuses_get_and_unknown_checkpoints(run, alice):
    client = _client(alice)
    assert client.get("/checkpoints/1/convert/").status_code == 405
    assert client.post("/checkpoints/999999/convert/").status_code == 404
