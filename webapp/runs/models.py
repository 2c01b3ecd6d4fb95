"""Runs of an experiment and what they report: status, metric points and log lines.

A run's life: queued (row written, Celery task enqueued) -> starting (Ray job submitted) ->
running (first heartbeat) -> succeeded | failed | cancelled | lost. ``lost`` means the Ray job
is gone or unknown to Ray (a restarted head) or its heartbeat stopped. ``origin`` says where
the run came from: the dashboard, a terminal's ``trinity run`` that registered itself (its
final status comes from the CLI's report or its heartbeats: ``webapp.runs.external``), or an
imported job dir (``webapp.ingest.job_dir``). ``key`` is the id the run's monitor streams under (``RFT_RUN_ID``,
Redis stream ``rft:<prefix>:run:<key>``): random, so two runs never mix their streams (and the
deployment prefix keeps deployments and test sessions sharing one Redis apart). ``tags`` (the
experiments' ``Tag`` rows) and ``notes`` are the owner's, set through ``webapp.runs.annotations``.

``MetricPoint.seq``, ``LogLine.seq`` and ``RolloutSample.seq`` are the ``RunEvent.seq`` of the
event each came from (the live page's snapshot includes rows up to one seq).
``MetricPoint.id`` and ``LogLine.id`` are the sequence numbers clients page by ("metric X of
run R after S" is a range scan of the (run, name, id) index).
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models

# the status vocabulary has a module of its own (webapp/run_status.py says why); the runs app's
# modules import it from here, beside Run
from webapp.run_status import ACTIVE_STATUSES, FINAL_STATUSES, RunStatus  # noqa: F401


def new_run_key() -> str:
    return f"r{secrets.token_hex(8)}"


# the headline metric of a stage that has no reward (the runs table's and the run header's
# figure in an SFT or DPO stage), by rft_core's names, with the label shown beside its value
HEADLINE_LABELS = {"actor/sft_loss": "SFT loss", "actor/dpo_loss": "DPO loss"}


class RunOrigin(models.TextChoices):
    DASHBOARD = "dashboard"  # launched from the dashboard (a Ray job it submitted)
    TERMINAL = "terminal"  # a `trinity run` that registered itself (RFT_DASHBOARD_URL + token)
    IMPORT = "import"  # an existing job dir read into the database


class RunQuerySet(models.QuerySet):
    def visible_to(self, user) -> RunQuerySet:
        if user is None or not user.is_authenticated:
            return self.none()
        return self if user.is_staff else self.filter(experiment__owner=user)

    def active(self) -> RunQuerySet:
        return self.filter(status__in=ACTIVE_STATUSES)


class Run(models.Model):
    experiment = models.ForeignKey(
        "experiments.Experiment", on_delete=models.CASCADE, related_name="runs"
    )
    number = models.PositiveIntegerField(help_text="1, 2, ... within the experiment")
    key = models.CharField(max_length=40, unique=True, default=new_run_key, editable=False)
    status = models.CharField(
        max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True
    )
    config_yaml = models.TextField(help_text="the config as launched (snapshot)")
    config = models.JSONField(default=dict)
    experiment_version = models.PositiveIntegerField(null=True, blank=True)
    launched_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    origin = models.CharField(
        max_length=16, choices=RunOrigin.choices, default=RunOrigin.DASHBOARD, db_index=True
    )
    submission_id = models.CharField(max_length=120, blank=True, help_text="Ray job submission id")
    celery_task_id = models.CharField(max_length=64, blank=True)
    job_dir = models.CharField(max_length=1000, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    exit_reason = models.CharField(max_length=300, blank=True)
    last_error = models.TextField(blank=True, help_text="last error line of the job's log")
    stage = models.CharField(max_length=100, blank=True)
    step = models.BigIntegerField(null=True, blank=True)
    total_steps = models.BigIntegerField(null=True, blank=True)
    step_times = models.JSONField(
        default=list, blank=True, help_text="[unix s, step] of the stage's newest steps (the ETA)"
    )
    phases = models.JSONField(
        default=dict, blank=True, help_text="role -> {phase, step, since}: what each role does"
    )
    last_eval_accuracy = models.FloatField(null=True, blank=True)
    best_eval_accuracy = models.FloatField(null=True, blank=True)
    latest_reward = models.FloatField(
        null=True,
        blank=True,
        help_text="the newest rollout/reward/mean (else critic/rewards/mean) point's value, "
        "kept by the ingestor (webapp.runs.telemetry) for the runs table",
    )
    headline_name = models.CharField(
        max_length=100,
        blank=True,
        help_text="the stage's own headline metric when it has no reward (HEADLINE_LABELS); "
        "blank: the reward (latest_reward) is the headline",
    )
    headline_value = models.FloatField(null=True, blank=True)
    tags = models.ManyToManyField("experiments.Tag", blank=True, related_name="runs")
    notes = models.TextField(blank=True, help_text="the owner's notes on the run")
    # a fork (webapp.checkpoints.forks): the run and checkpoint it started from, at step fork_step
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )
    fork_stage = models.CharField(max_length=100, blank=True)
    fork_step = models.BigIntegerField(null=True, blank=True)
    fork_from_path = models.CharField(
        max_length=1000, blank=True, help_text="the parent's global_step_N the fork starts from"
    )

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(fields=["experiment", "number"], name="run_unique_number")
        ]
        indexes = [models.Index(fields=["experiment", "-number"], name="run_experiment_number")]

    def __str__(self) -> str:
        return f"{self.experiment} #{self.number}"

    def get_absolute_url(self) -> str:
        return f"/runs/{self.pk}/"

    @property
    def headline(self) -> dict | None:
        """The figure the run's stage is judged by now: ``{"name", "label", "value"}``, its
        reward, or (a stage without one, SFT) its own headline metric; None before any."""
        if self.headline_name:
            label = HEADLINE_LABELS.get(self.headline_name, self.headline_name)
            return {"name": self.headline_name, "label": label, "value": self.headline_value}
        if self.latest_reward is not None:
            return {"name": "reward", "label": "Reward", "value": self.latest_reward}
        return None

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def owner_id(self) -> int:
        return self.experiment.owner_id


class MetricPoint(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metric_points")
    name = models.CharField(max_length=200)
    role = models.CharField(max_length=32, blank=True)
    stage = models.CharField(max_length=100, blank=True)
    step = models.BigIntegerField(null=True, blank=True)
    wall_time = models.FloatField(help_text="unix seconds when the run emitted it")
    value = models.FloatField(null=True, blank=True, help_text="null for NaN/inf")
    seq = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="RunEvent.seq of the event it came from"
    )

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["run", "name", "id"], name="metric_run_name_seq")]


class LogLine(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="log_lines")
    actor = models.CharField(max_length=64, blank=True, help_text="explorer, trainer, ...")
    level = models.CharField(max_length=10, blank=True)
    stage = models.CharField(max_length=100, blank=True)
    wall_time = models.FloatField()
    text = models.TextField()
    seq = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="RunEvent.seq of the event it came from"
    )

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["run", "id"], name="log_run_seq"),
            models.Index(fields=["run", "actor", "id"], name="log_run_actor_seq"),
        ]


class RolloutSample(models.Model):
    """One rollout the explorer kept (``samples`` events; ``monitor.rollout_samples_*`` says how
    many of which steps): the prompt, the response, the truth, the reward, its task group, its
    advantage, its length and whether max tokens cut it; ``tokens`` holds the token view
    (``{"tokens": [...], "logprobs": [...]}``, plus ``trainer_logprobs`` where recorded) and
    ``extra`` the reward parts and whatever else the monitor sent."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="rollout_samples")
    stage = models.CharField(max_length=100, blank=True)
    step = models.BigIntegerField(null=True, blank=True)
    seq = models.PositiveBigIntegerField(help_text="RunEvent.seq of the samples event")
    prompt = models.TextField(blank=True)
    response = models.TextField(blank=True)
    truth = models.TextField(blank=True)
    reward = models.FloatField(null=True, blank=True, help_text="null for NaN/inf")
    group = models.IntegerField(
        null=True, blank=True, help_text="the task group within the step, from 0"
    )
    advantage = models.FloatField(
        null=True, blank=True, help_text="null: computed by the trainer, or the group filtered out"
    )
    response_length = models.IntegerField(null=True, blank=True, help_text="response tokens")
    truncated = models.BooleanField(default=False, help_text="the response hit max tokens")
    tokens = models.JSONField(default=dict, blank=True, help_text="the token view's data")
    extra = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["run", "id"], name="sample_run_seq"),
            models.Index(fields=["run", "stage", "step"], name="sample_run_step"),
        ]
