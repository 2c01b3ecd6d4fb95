"""Run events as the ingestor stored them from the Redis streams ``rft:<prefix>:run:<key>``.

One row per stream entry, unique on (run_key, stream_id), so replaying a stream writes nothing
twice. ``seq`` is the dense per-run sequence number (1, 2, 3, ... in stream order) clients page
and resume by; the ingestor assigns it under the run's lock (``workers.ingestor``). ``run_key`` is ``Run.key`` (the run's ``RFT_RUN_ID``); a key that matches no Run (a CLI
run with ``RFT_RUN_ID`` set by hand) keeps its events here only. The dashboard's richer rows
(metric points, log lines, checkpoints, run status) are projected from each new event by
``webapp.ingest.projection`` through the runs and checkpoints apps.
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
    stage = models.CharField(max_length=100, blank=True, help_text="stage_name; '' unstaged")
    step = models.BigIntegerField(null=True, blank=True)
    seq = models.PositiveBigIntegerField(
        help_text="1, 2, 3, ... per run key in stream order (assigned by the ingestor)"
    )
    payload = models.JSONField(default=dict)
    emitted_at = models.DateTimeField(help_text="when the run emitted it")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["run_key", "stream_id"], name="runevent_unique_stream_entry"
            ),
            # dense per run: a second writer of one seq fails its transaction (nothing half-written);
            # its index also serves "the events of run R after seq S"
            models.UniqueConstraint(fields=["run_key", "seq"], name="runevent_unique_run_seq"),
        ]

    def __str__(self) -> str:
        return f"{self.run_key} {self.stream_id} {self.kind}"

    def as_message(self) -> dict:
        """The protocol's Event (``webapp.runs.live``): what a client receives for this event."""
        return {
            "seq": self.seq,
            "kind": self.kind,
            "role": self.role,
            "stage": self.stage,
            "step": self.step,
            "ts": self.emitted_at.timestamp(),
            "data": self.payload,
        }
