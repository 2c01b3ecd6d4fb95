"""The statuses a run moves through, on their own so that a page of an app below the runs app
(the experiments list, which sorts and filters by an experiment's last run's status) names them
without importing it. The status machine itself (who moves a run from which status to which) is
``webapp.runs.actions``'s; ``webapp.runs.models`` stores ``Run.status`` with these choices.
"""

from __future__ import annotations

from django.db import models


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"


ACTIVE_STATUSES = frozenset({RunStatus.QUEUED, RunStatus.STARTING, RunStatus.RUNNING})
FINAL_STATUSES = frozenset(
    {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.LOST}
)
