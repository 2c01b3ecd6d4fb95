"""Checkpoint rows of a run whose trainer prunes (``trainer.max_checkpoints_to_keep``): a row
whose ``global_step_N`` is gone turns ``pruned`` (keeping its last size) when the next
checkpoint event comes, and ``/checkpoints/run/<id>/disk.json`` gives the job dir's size."""

from __future__ import annotations

import shutil

import pytest
from api_helpers import make_experiment, make_run, make_user, session_client

from webapp.checkpoints.actions import observe_checkpoint, sync_checkpoints
from webapp.checkpoints.models import Checkpoint
from webapp.runs.live import checkpoint_state

pytestmark = pytest.mark.django_db


def _step(job_dir, step, size):
    d = job_dir / "rft" / f"global_step_{step}"
    (d / "actor").mkdir(parents=True)
    (d / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"w" * size)
    (d / ".full_checkpoint").touch()
    return d


@pytest.fixture
def run(tmp_path):
    owner = make_user("alice")
    run = make_run(make_experiment(owner, "alpha"))
    run.job_dir = str(tmp_path / "job")
    run.save(update_fields=["job_dir"])
    return run


def test_a_checkpoint_deleted_by_retention_turns_pruned_on_the_next_save(run, tmp_path):
    job = tmp_path / "job"
    first = _step(job, 10, 1000)
    observe_checkpoint(run, stage="rft", step=10, path=str(first))
    second = _step(job, 20, 2000)
    shutil.rmtree(first)  # the trainer's retention, before it reports step 20
    observe_checkpoint(run, stage="rft", step=20, path=str(second))
    rows = {c.step: c for c in Checkpoint.objects.filter(run=run)}
    assert rows[10].pruned and rows[10].size_bytes == 1000  # the size it had
    assert not rows[20].pruned and rows[20].size_bytes == 2000
    assert checkpoint_state(rows[10])["pruned"] is True


def test_a_resync_of_the_tree_marks_pruned_rows_too(run, tmp_path):
    job = tmp_path / "job"
    first, second = _step(job, 10, 10), _step(job, 20, 10)
    assert [c.step for c in sync_checkpoints(run)] == [10, 20]
    shutil.rmtree(first)
    sync_checkpoints(run)
    assert list(Checkpoint.objects.filter(run=run, pruned=True).values_list("step", flat=True)) == [
        10
    ]
    assert second.is_dir()


def test_disk_json_gives_the_job_dir_size_to_its_owner_only(run, tmp_path):
    job = tmp_path / "job"
    _step(job, 10, 1000)
    _step(job, 20, 3000)
    (job / "log").mkdir()
    (job / "log" / "trainer.log").write_bytes(b"l" * 500)
    owner = session_client(run.experiment.owner)
    body = owner.get(f"/checkpoints/run/{run.pk}/disk.json").json()
    assert body["job_dir"] == str(job)
    assert body["checkpoints_on_disk"] == 2
    assert body["checkpoint_bytes"] == 4000
    assert body["total_bytes"] == 4500
    other = session_client(make_user("bob"))
    assert other.get(f"/checkpoints/run/{run.pk}/disk.json").status_code in (403, 404)
