"""The audit trail: one append-only row per action a person (or the system) took.

Append-only is enforced here, below the admin and every caller: saving an existing row,
``delete()`` on a row, and ``update()`` / ``delete()`` on a queryset raise ``AuditImmutable``.
Rows are written only through :func:`webapp.audit.record.record`. The actor is kept as a user id
and a username snapshot (no database foreign key), so deleting a user changes no audit row.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class AuditImmutable(Exception):
    """An attempt to change or delete an audit row."""


class AuditQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AuditImmutable("audit events are append-only: update() is refused")

    def delete(self):
        raise AuditImmutable("audit events are append-only: delete() is refused")

    def bulk_update(self, objs, fields, batch_size=None):
        raise AuditImmutable("audit events are append-only: bulk_update() is refused")

    def update_or_create(self, *args, **kwargs):
        raise AuditImmutable("audit events are append-only: update_or_create() is refused")


class AuditEvent(models.Model):
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
        help_text="who acted; empty for the system (a worker, the ingestor, reconcile)",
    )
    actor_name = models.CharField(max_length=150, help_text="username at the time, or 'system'")
    action = models.CharField(max_length=64, db_index=True, help_text="e.g. run.launch")
    target_type = models.CharField(max_length=64, blank=True, db_index=True)
    target_id = models.CharField(max_length=64, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=400, blank=True)
    created = models.DateTimeField(default=timezone.now, db_index=True)

    objects = AuditQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["target_type", "target_id"], name="audit_target")]

    def __str__(self) -> str:
        target = f" {self.target_type}:{self.target_id}" if self.target_type else ""
        return f"{self.created:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action}{target}"

    def save(self, *args, **kwargs):
        if self.pk is not None or not self._state.adding:
            raise AuditImmutable("audit events are append-only: an existing row cannot be saved")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AuditImmutable("audit events are append-only: delete() is refused")
