"""State changes of checkpoints: rows seen in a run's events or its job dir tree, and the
conversion to Hugging Face weights.

- :func:`observe_checkpoint` (the ingestor, for a ``checkpoint`` event) and
  :func:`sync_checkpoints` (a run's whole tree, every stage) write rows from what the tree shows
  (size, whether ``actor/huggingface/`` holds a loadable model), read with the torch-free
  ``rft_core.checkpoint.layout``. System actions: no permission check, no audit row.
  A row whose step dir is gone (pruned by ``trainer.max_checkpoints_to_keep``) turns ``pruned``.
  :func:`job_dir_usage` is the job dir's size on disk (the run page shows it under the rows).
- :func:`convert_checkpoint` is a user's action: access check, the claim of the run's job dir
  (``webapp.runs.claims``: no conversion writes into a job dir another user's run owns), audit ``checkpoint.convert``,
  ``hf_status`` converting, and the Celery task (``checkpoints.tasks``) enqueued on commit.
- :func:`refuse_if_pruned` is the one refusal of a checkpoint gone from disk, for Convert, Fork
  (``webapp.checkpoints.forks``) and the API alike: a 409 saying it was pruned by retention
  (``trainer.max_checkpoints_to_keep``) or, in a run that keeps every checkpoint, deleted.

Every new or changed row is pushed to the run's live page (:func:`publish_checkpoint`, sent on
commit; the message's shape is ``webapp.runs.live.checkpoint_state``).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rft_core.checkpoint import layout
from webapp.accounts.access import check
from webapp.audit.record import Actor, record
from webapp.celery import app as celery_app
from webapp.checkpoints.models import Checkpoint, HFStatus
from webapp.errors import ActionError
from webapp.runs.claims import claim_job_dir
from webapp.runs.live import checkpoint_state, run_group, send
from webapp.runs.models import Run, RunOrigin

# A conversion that wrote no progress for this long is taken for dead (its worker was killed):
# converting it again is allowed.
CONVERT_STALE_AFTER = timedelta(minutes=15)


def publish_checkpoint(ckpt: Checkpoint) -> None:
    """The checkpoint's full state, ``{"type": "checkpoint", "checkpoint": CheckpointState}``, to
    its run's page once the surrounding transaction commits (read again then, as
    ``webapp.runs.live.publish_run`` does)."""
    pk = ckpt.pk

    def push() -> None:
        fresh = Checkpoint.objects.filter(pk=pk).first()
        if fresh is not None:
            message = {"type": "checkpoint", "checkpoint": checkpoint_state(fresh)}
            send([run_group(fresh.run_id)], message)

    transaction.on_commit(push)


def _observe(run: Run, stage: str, step: int, path: Path) -> Checkpoint:
    on_disk = path.is_dir()
    size = layout.dir_size(path) if on_disk else None
    ready = layout.hf_model_ready(path)
    checkpoint, created = Checkpoint.objects.get_or_create(
        run=run,
        stage=stage,
        step=step,
        defaults={
            "path": str(path),
            "size_bytes": size,
            "hf_status": HFStatus.READY if ready else HFStatus.ABSENT,
            "hf_path": str(layout.hf_dir(path)) if ready else "",
            "pruned": not on_disk,
        },
    )
    if created:
        publish_checkpoint(checkpoint)
        return checkpoint
    # a pruned step keeps the size it had: the row says what was deleted
    changes = {"path": str(path), "pruned": not on_disk}
    if on_disk:
        changes["size_bytes"] = size
    if checkpoint.hf_status != HFStatus.CONVERTING:
        if ready:
            changes |= {"hf_status": HFStatus.READY, "hf_path": str(layout.hf_dir(path))}
        elif checkpoint.hf_status == HFStatus.READY:  # the weights were removed
            changes |= {"hf_status": HFStatus.ABSENT, "hf_path": ""}
    changed = {k: v for k, v in changes.items() if getattr(checkpoint, k) != v}
    if changed:
        for name, value in changed.items():
            setattr(checkpoint, name, value)
        checkpoint.save(update_fields=[*changed, "updated"])
        publish_checkpoint(checkpoint)
    return checkpoint


def observe_checkpoint(run: Run, *, stage: str, step: int, path: str) -> Checkpoint:
    """The row of ``global_step_<step>`` of ``stage``, created or refreshed from the tree; the
    stage's older rows whose step dirs the trainer's retention deleted on this save turn
    ``pruned``."""
    checkpoint = _observe(run, stage or "", int(step), Path(path))
    observe_pruned(run, stage or "")
    return checkpoint


def observe_pruned(run: Run, stage: str) -> list[Checkpoint]:
    """Mark the rows of ``stage`` whose ``global_step_N`` is gone from disk; returns them."""
    gone = [
        c
        for c in Checkpoint.objects.filter(run=run, stage=stage, pruned=False)
        if not Path(c.path).is_dir()
    ]
    for checkpoint in gone:
        checkpoint.pruned = True
        checkpoint.save(update_fields=["pruned", "updated"])
        publish_checkpoint(checkpoint)
    return gone


def job_dir_usage(run: Run) -> dict[str, int | str | None]:
    """Bytes on disk of the run's job dir (every stage, buffers and logs included) and of its
    checkpoints still on disk."""
    if not run.job_dir or not Path(run.job_dir).is_dir():
        return {"job_dir": run.job_dir or "", "total_bytes": None, "checkpoint_bytes": None}
    found = [c for c in layout.scan_checkpoints(Path(run.job_dir)) if c.full]
    return {
        "job_dir": run.job_dir,
        "total_bytes": layout.dir_size(Path(run.job_dir)),
        "checkpoint_bytes": sum(c.size_bytes() for c in found),
        "checkpoints_on_disk": len(found),
    }


def sync_checkpoints(run: Run) -> list[Checkpoint]:
    """Rows for every saved checkpoint in the run's job dir and its stages' job dirs
    (weight-sync-only step dirs are not checkpoints). Idempotent; returns them by stage, step."""
    if not run.job_dir:
        return []
    rows = [
        _observe(run, found.stage, found.step, found.path)
        for found in layout.scan_checkpoints(Path(run.job_dir))
        if found.full or (found.hf_path / "config.json").is_file()
    ]
    for stage in set(Checkpoint.objects.filter(run=run).values_list("stage", flat=True)):
        observe_pruned(run, stage)
    return rows


RETENTION_SETTING = "trainer.max_checkpoints_to_keep"


def refuse_if_pruned(checkpoint: Checkpoint, doing: str) -> None:
    """409 when ``checkpoint``'s step dir is gone from disk, saying it was pruned by the
    run's retention (naming ``trainer.max_checkpoints_to_keep``) or, in a run without
    retention, that it was deleted. A row found gone here turns ``pruned`` first (the run page
    then shows it so). ``doing``: the refused action in words ("convert", "fork from")."""
    path = Path(checkpoint.path)
    if not checkpoint.pruned and path.is_dir():
        return
    if not checkpoint.pruned:
        observe_pruned(checkpoint.run, checkpoint.stage)
    where = f"{checkpoint.stage}/global_step_{checkpoint.step}".lstrip("/")
    trainer = (checkpoint.run.config or {}).get("trainer") or {}
    keep = trainer.get("max_checkpoints_to_keep")
    if isinstance(keep, int) and keep > 0:
        best = trainer.get("best_checkpoint_metric")
        kept = f"the newest {keep} of each stage" + (f" and the best by {best}" if best else "")
        why = (
            f"it was pruned by checkpoint retention ({RETENTION_SETTING}: {keep} keeps {kept}); "
            "choose a checkpoint still on disk, or launch with a larger "
            f"{RETENTION_SETTING} (0 keeps all)"
        )
    else:
        why = "its directory was deleted (the run keeps every checkpoint, so not by retention)"
    message = f"cannot {doing} {where}: {path} is gone from disk: {why}"
    raise ActionError(message, errors={"checkpoint": why}, status=409)


def _refuse_unless_convertible(checkpoint: Checkpoint) -> Path:
    path = Path(checkpoint.path)
    where = f"{checkpoint.stage}/global_step_{checkpoint.step}".lstrip("/")
    if checkpoint.hf_status == HFStatus.CONVERTING:
        stale = timezone.now() - checkpoint.updated > CONVERT_STALE_AFTER
        if not stale:
            raise ActionError(f"{where} is being converted already", status=409)
    if not path.is_dir():
        refuse_if_pruned(checkpoint, "convert")
    if not (path / layout.ACTOR_DIR).is_dir():
        raise ActionError(f"{where}: {path} has no actor/ directory to convert", status=409)
    job_dir = Path(checkpoint.run.job_dir) if checkpoint.run.job_dir else None
    if job_dir is not None and not path.resolve().is_relative_to(job_dir.resolve()):
        raise ActionError(f"{where}: {path} is outside the run's job dir {job_dir}", status=409)
    return path


def _claim_job_dir_of(actor: Actor, checkpoint: Checkpoint) -> dict[str, str]:
    """A conversion writes into the run's job dir: the actor must be able to claim it
    (``webapp.runs.claims``), so a run that took another user's job dir (an import from before
    the claim rule) converts nothing there. Refused: 403, audited, nothing written."""
    run = checkpoint.run
    if actor.is_system or not run.job_dir:
        return {}
    claim = claim_job_dir(
        actor,
        run.job_dir,
        action="checkpoint.convert",
        target=checkpoint,
        run=run,
        placed_by_dashboard=run.origin == RunOrigin.DASHBOARD,
    )
    return {"claim": claim.basis}


def convert_checkpoint(actor: Actor, checkpoint: Checkpoint) -> Checkpoint:
    """Queue the conversion of ``checkpoint`` to Hugging Face weights (``actor/huggingface``).
    Refused (403) when the actor may not claim the run's job dir, (409) while it is converting
    or when its step dir is gone."""
    check(actor, checkpoint, "checkpoint.convert")
    refuse_if_pruned(checkpoint, "convert")
    claim = _claim_job_dir_of(actor, checkpoint)
    with transaction.atomic():
        checkpoint = (
            Checkpoint.objects.select_for_update().select_related("run").get(pk=checkpoint.pk)
        )
        _refuse_unless_convertible(checkpoint)
        before = {"hf_status": checkpoint.hf_status}
        checkpoint.hf_status = HFStatus.CONVERTING
        checkpoint.hf_progress = 0.0
        checkpoint.hf_error = ""
        checkpoint.save(update_fields=["hf_status", "hf_progress", "hf_error", "updated"])
        record(
            actor,
            "checkpoint.convert",
            checkpoint,
            before=before,
            after={"hf_status": checkpoint.hf_status, "path": checkpoint.path, **claim},
        )
        # None: Celery's default queue; a deployment may route conversions to the workers on
        # the hosts that see the checkpoint storage
        queue = getattr(settings, "RFT_CONVERT_QUEUE", None)
        pk = checkpoint.pk
        publish_checkpoint(checkpoint)
        transaction.on_commit(
            lambda: celery_app.send_task("checkpoints.convert", args=(pk,), queue=queue)
        )
    return checkpoint
