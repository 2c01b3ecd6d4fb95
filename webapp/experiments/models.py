"""Experiments: a named config a user launches runs of, with the history of its config.

``config_yaml`` is the canonical YAML of the config as the user wrote it (their keys, in the
schema's order, interpolations such as ``${oc.env:RFT_DEMO_DIR,./var/demo}`` kept unresolved);
``config`` is the same mapping parsed. Every save that changes the config adds an
``ExperimentVersion``; ``version`` is the number of the current one.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Tag(models.Model):
    name = models.CharField(max_length=64, unique=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ExperimentQuerySet(models.QuerySet):
    def visible_to(self, user) -> ExperimentQuerySet:
        """The one visibility rule (see ``webapp.accounts.access``): staff see all, others their own."""
        if user is None or not user.is_authenticated:
            return self.none()
        return self if user.is_staff else self.filter(owner=user)


class Experiment(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="experiments"
    )
    name = models.CharField(max_length=200)
    project = models.CharField(max_length=200, blank=True, db_index=True)
    description = models.TextField(blank=True)
    tags = models.ManyToManyField(Tag, blank=True, related_name="experiments")
    config_yaml = models.TextField(help_text="canonical YAML, interpolations unresolved")
    config = models.JSONField(default=dict, help_text="config_yaml parsed")
    version = models.PositiveIntegerField(default=1, help_text="number of the current version")
    last_run = models.ForeignKey(
        "runs.Run",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="the newest run (kept here so the list page needs no subquery)",
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True, db_index=True)

    objects = ExperimentQuerySet.as_manager()

    class Meta:
        ordering = ["-updated", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "name"], name="experiment_unique_owner_name")
        ]
        indexes = [models.Index(fields=["owner", "-updated"], name="experiment_owner_updated")]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return f"/experiments/{self.pk}/"


class ExperimentVersion(models.Model):
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    config_yaml = models.TextField()
    config = models.JSONField(default=dict)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    note = models.CharField(max_length=200, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["experiment", "-number"]
        constraints = [
            models.UniqueConstraint(
                fields=["experiment", "number"], name="experimentversion_unique_number"
            )
        ]

    def __str__(self) -> str:
        return f"{self.experiment} v{self.number}"
