"""Run events as the ingestor stored them from the Redis streams ``rft:run:<id>``.

One row per stream entry, unique on (run_key, stream_id), so replaying a stream writes nothing
twice. The dashboard's richer models (metric points, log chunks, checkpoints) are derived from
these events by later apps.
"""

from __future__ import annotations

from django.db import models


class RunEvent(models.Model):
    run_key = models.CharField(max_length=80, db_index=True, help_text="RFT_RUN_ID of the run")
    stream_id = models.CharField(
        max_length=40, help_text="Redis stream entry id, e.g. 1733150000000-0"
    )
    kind = models.CharField(max_length=16)
    role = models.CharField(max_length=32, blank=True)
    step = models.BigIntegerField(null=True, blank=True)
    payload = models.JSONField(default=dict)
    emitted_at = models.DateTimeField(help_text="when the run emitted it")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["run_key", "stream_id"], name="runevent_unique_stream_entry"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_key} {self.stream_id} {self.kind}"

    def as_message(self) -> dict:
        """The JSON a WebSocket client receives for this event."""
        return {
            "id": self.pk,
            "stream_id": self.stream_id,
            "run": self.run_key,
            "kind": self.kind,
            "role": self.role,
            "step": self.step,
            "data": self.payload,
            "ts": self.emitted_at.timestamp(),
        }
