"""The convert action through a real Celery worker process: a real sharded checkpoint of a tiny
Qwen2 model becomes Hugging Face weights that transformers loads with the same logits; a
corrupt shard ends ``failed`` with the converter's one-line message."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))

from checkpoint_fixtures import tiny_model_fixtures  # noqa: E402
from convert_fixtures import assert_same_logits, save_job_step  # noqa: E402

from webapp.audit.record import Actor  # noqa: E402
from webapp.checkpoints.actions import convert_checkpoint, sync_checkpoints  # noqa: E402
from webapp.checkpoints.models import Checkpoint, HFStatus  # noqa: E402
from webapp.experiments.models import Experiment  # noqa: E402
from webapp.runs.models import Run  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)  # the worker reads our committed rows


tokenizer, model = tiny_model_fixtures()


@pytest.fixture
def converting(settings, celery_worker_queue, tmp_path, model, tokenizer):
    """A run whose job dir holds global_step_3 (world size 2, no HF weights), its row, and a
    function that converts it through the action and waits for the worker to finish."""
    settings.RFT_CONVERT_QUEUE = celery_worker_queue
    alice = get_user_model().objects.create_user("alice", password=None)
    experiment = Experiment.objects.create(owner=alice, name="e", config_yaml="", config={})
    job = tmp_path / "run-1" / "proj" / "demo"
    step = save_job_step(job, 3, model, tokenizer, world_size=2)
    run = Run.objects.create(experiment=experiment, number=1, config_yaml="", job_dir=str(job))
    (checkpoint,) = sync_checkpoints(run)
    assert checkpoint.hf_status == HFStatus.ABSENT

    def convert() -> Checkpoint:
        convert_checkpoint(Actor(user=alice), checkpoint)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            row = Checkpoint.objects.get(pk=checkpoint.pk)
            if row.hf_status != HFStatus.CONVERTING:
                return row
            time.sleep(0.2)
        raise AssertionError(f"still converting after 180 s (progress {row.hf_progress})")

    return step, convert


def test_a_worker_converts_a_sharded_checkpoint_into_loadable_hf_weights(
    converting, model, tokenizer
):
    step, convert = converting
    row = convert()
    assert (row.hf_status, row.hf_error, row.hf_progress) == (HFStatus.READY, "", 1.0)
    assert row.hf_path == str(step / "actor" / "huggingface")
    assert (Path(row.hf_path) / "model.safetensors").is_file()
    assert_same_logits(Path(row.hf_path), model, tokenizer)  # AutoModelForCausalLM loads it


def test_a_corrupt_shard_ends_failed_with_the_converters_message(converting):
    step, convert = converting
    shard = step / "actor" / "model_world_size_2_rank_1.pt"
    shard.write_bytes(shard.read_bytes()[:300])
    row = convert()
    assert row.hf_status == HFStatus.FAILED
    assert (
        "global_step_3/actor/model_world_size_2_rank_1.pt is corrupt or unreadable" in row.hf_error
    )
    assert "\n" not in row.hf_error
    assert not (step / "actor" / "huggingface" / "model.safetensors").exists()
