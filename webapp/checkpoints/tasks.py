"""Celery tasks ``checkpoints.evaluate`` / ``checkpoints.follow_evaluation`` (a bench job of
chosen checkpoints, ``webapp.checkpoints.evaluation``) and ``checkpoints.convert``: one checkpoint's step dir -> Hugging Face weights, by
``rft_core.convert`` (torch is imported here, in the worker, never in the web process).

The progress callback writes ``Checkpoint.hf_progress`` (0..1, at most once per percent);
the row ends ``ready`` with ``hf_path``, or ``failed`` with ``hf_error`` set to the converter's
one-line message. The conversion is queued by ``checkpoints.actions.convert_checkpoint``.
Each write (start, progress, ready/failed) is pushed to the run's live page
(``webapp.checkpoints.actions.publish_checkpoint``).
"""

from __future__ import annotations

import logging
from pathlib import Path

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from rft_core.checkpoint import layout
from rft_core.errors import RFTError
from webapp.celery import same_queue
from webapp.checkpoints.actions import publish_checkpoint
from webapp.checkpoints.models import Checkpoint, HFStatus

log = logging.getLogger(__name__)


def _base_model_dir(checkpoint: Checkpoint) -> str | None:
    """The run's model directory, used only when the step lacks ``huggingface/config.json``
    (a checkpoint written by another trainer); None unless it is a plain existing path."""
    model_path = ((checkpoint.run.config or {}).get("model") or {}).get("model_path")
    if isinstance(model_path, str) and "${" not in model_path:
        if (Path(model_path).expanduser() / "config.json").is_file():
            return model_path
    return None


def _finish(pk: int, **fields) -> None:
    Checkpoint.objects.filter(pk=pk).update(updated=timezone.now(), **fields)
    publish_checkpoint(Checkpoint(pk=pk))


@shared_task(name="checkpoints.convert")
def convert_checkpoint_task(checkpoint_id: int) -> str:
    """Returns the final hf_status."""
    from rft_core.convert import convert_checkpoints

    checkpoint = Checkpoint.objects.select_related("run").get(pk=checkpoint_id)
    publish_checkpoint(checkpoint)  # the worker took it: converting, 0 %
    written = [-1]  # last percent written

    def on_progress(_label: str, done: int, total: int) -> None:
        percent = int(100 * done / total) if total else 100
        if percent != written[0]:
            written[0] = percent
            _finish(checkpoint_id, hf_progress=percent / 100)

    try:
        report = convert_checkpoints(
            checkpoint.path, base_model_dir=_base_model_dir(checkpoint), progress=on_progress
        )
    except Exception as err:  # a user-facing RFTError, or a bug: never left "converting"
        line = (str(err).splitlines() or [type(err).__name__])[0]
        _finish(checkpoint_id, hf_status=HFStatus.FAILED, hf_error=line)
        if not isinstance(err, (RFTError, OSError)):
            raise
        return HFStatus.FAILED
    if report.failed:
        reason = report.failed[0].reason.splitlines()[0] if report.failed[0].reason else "failed"
        _finish(checkpoint_id, hf_status=HFStatus.FAILED, hf_error=reason)
        return HFStatus.FAILED
    hf = layout.hf_dir(Path(checkpoint.path))
    _finish(
        checkpoint_id,
        hf_status=HFStatus.READY,
        hf_path=str(hf),
        hf_progress=1.0,
        hf_error="",
        size_bytes=layout.dir_size(Path(checkpoint.path)),
    )
    return HFStatus.READY


@shared_task(name="checkpoints.evaluate", bind=True)
def evaluate(self, evaluation_id: int) -> str:
    """Start the bench job of an evaluation (``webapp.checkpoints.evaluation``), then follow it."""
    from webapp.checkpoints.evaluation import start_evaluation

    evaluation = start_evaluation(evaluation_id)
    if evaluation.status == "running":
        follow_evaluation.apply_async(
            (evaluation_id,), countdown=settings.RFT_FOLLOW_INTERVAL_S, queue=same_queue(self)
        )
    return evaluation.status


@shared_task(name="checkpoints.follow_evaluation", bind=True, ignore_result=True)
def follow_evaluation(self, evaluation_id: int) -> None:
    from webapp.checkpoints.evaluation import follow_evaluation as poll

    if poll(evaluation_id):
        follow_evaluation.apply_async(
            (evaluation_id,), countdown=settings.RFT_FOLLOW_INTERVAL_S, queue=same_queue(self)
        )
