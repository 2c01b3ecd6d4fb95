"""The checkpoints app's part in other apps' changes (connected in ``apps.py``).

A run that reached its final status (``webapp.runs.signals.run_finished``) gets a row for each
checkpoint in its job dir whose event never arrived: the tree is the record. A tree that cannot
be read is logged, never raised into the finishing run's action.
"""

from __future__ import annotations

import logging

from django.dispatch import receiver

from webapp.checkpoints.actions import sync_checkpoints
from webapp.runs.models import Run
from webapp.runs.signals import run_finished

log = logging.getLogger(__name__)


@receiver(run_finished, dispatch_uid="checkpoints.sync_when_a_run_finishes")
def sync_when_a_run_finishes(sender, run: Run, **_) -> None:
    if not run.job_dir:
        return
    try:
        sync_checkpoints(run)
    except OSError as err:
        log.warning("run %s: could not read its checkpoints: %s", run.pk, err)
