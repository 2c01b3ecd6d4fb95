"""Celery tasks of runs, each a thin wrapper over ``webapp.runs.actions``:

    runs.launch(run_id)     write the launch config, submit the Ray job, then follow it
    runs.follow(run_id)     poll the run's Ray job every RFT_FOLLOW_INTERVAL_S until it ends
    runs.cancel(run_id)     stop the Ray job, wait until it stopped, mark the run cancelled
    runs.reconcile()        settle every live run (Celery beat; and when a worker starts)

A task that re-enqueues itself (follow) stays on the queue it came from, so a worker serving
one queue (a test's, or a host's that sees the checkpoint storage) keeps its runs
(``webapp.celery.same_queue``).
"""

from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings

from webapp.celery import same_queue
from webapp.runs import actions

log = logging.getLogger(__name__)


@shared_task(name="runs.launch", bind=True)
def launch(self, run_id: int) -> str:
    run = actions.start_run(run_id)
    if run.submission_id and run.status in actions.LIVE:
        follow.apply_async(
            (run_id,), countdown=settings.RFT_FOLLOW_INTERVAL_S, queue=same_queue(self)
        )
    return run.status


@shared_task(name="runs.follow", bind=True, ignore_result=True)
def follow(self, run_id: int) -> None:
    if actions.follow_run(run_id):
        follow.apply_async(
            (run_id,), countdown=settings.RFT_FOLLOW_INTERVAL_S, queue=same_queue(self)
        )


@shared_task(name="runs.cancel")
def cancel(run_id: int) -> str:
    return actions.stop_run(run_id).status


@shared_task(name="runs.reconcile")
def reconcile() -> list[int]:
    return [run.pk for run in actions.reconcile_runs()]


@worker_ready.connect
def reconcile_when_a_worker_starts(sender=None, **_) -> None:
    """Runs whose job died while no worker was up are settled now, not at the next beat."""
    queues = list(sender.app.amqp.queues.consume_from or {}) if sender is not None else []
    reconcile.apply_async(queue=queues[0] if queues else settings.RFT_RUNS_QUEUE)
