"""Checkpoints of a run: one row per ``global_step_N`` of a stage's job dir, with its Hugging
Face conversion state. Rows come from the run's checkpoint events and from reading the tree."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class HFStatus(models.TextChoices):
    ABSENT = "absent", "not converted"
    CONVERTING = "converting"
    READY = "ready", "HF ready"
    FAILED = "failed"


class CheckpointQuerySet(models.QuerySet):
    def visible_to(self, user) -> CheckpointQuerySet:
        if user is None or not user.is_authenticated:
            return self.none()
        return self if user.is_staff else self.filter(run__experiment__owner=user)


class Checkpoint(models.Model):
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="checkpoints")
    stage = models.CharField(max_length=100, blank=True)
    step = models.BigIntegerField()
    path = models.CharField(max_length=1000, help_text="the global_step_N directory")
    size_bytes = models.BigIntegerField(null=True, blank=True)
    hf_status = models.CharField(max_length=12, choices=HFStatus.choices, default=HFStatus.ABSENT)
    hf_path = models.CharField(max_length=1000, blank=True)
    hf_progress = models.FloatField(null=True, blank=True, help_text="0..1 while converting")
    hf_error = models.TextField(blank=True)
    pruned = models.BooleanField(
        default=False,
        help_text="its global_step_N is gone from disk (trainer.max_checkpoints_to_keep)",
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    objects = CheckpointQuerySet.as_manager()

    class Meta:
        ordering = ["run", "stage", "step"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "stage", "step"], name="checkpoint_unique_stage_step"
            )
        ]

    def __str__(self) -> str:
        where = f"{self.stage}/" if self.stage else ""
        return f"{self.run} {where}global_step_{self.step}"


class EvaluationStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class EvaluationQuerySet(models.QuerySet):
    def visible_to(self, user) -> EvaluationQuerySet:
        if user is None or not user.is_authenticated:
            return self.none()
        return self if user.is_staff else self.filter(run__experiment__owner=user)


class Evaluation(models.Model):
    """Chosen checkpoints of a run evaluated on chosen eval tasksets by a ``mode: bench`` Ray
    job (``webapp.checkpoints.evaluation``). ``results``: ``{"<checkpoint id>": {"<taskset>":
    {"metric": "accuracy/mean@k", "value": x}}}`` from the job's monitor record."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="evaluations")
    checkpoints = models.ManyToManyField(Checkpoint, related_name="evaluations")
    tasksets = models.JSONField(default=list, help_text="names of the eval tasksets")
    status = models.CharField(
        max_length=12, choices=EvaluationStatus.choices, default=EvaluationStatus.QUEUED
    )
    launched_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    submission_id = models.CharField(max_length=120, blank=True)
    job_dir = models.CharField(max_length=1000, blank=True)
    results = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = EvaluationQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.run} evaluation {self.pk}"

    def get_absolute_url(self) -> str:
        return f"/runs/{self.run_id}/evaluations/#evaluation-{self.pk}"
