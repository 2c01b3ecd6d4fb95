"""The Celery app: broker and result backend on REDIS_URL, settings from Django's CELERY_*.

It lives in the Django project (Celery's layout for Django) so that the web apps' tasks
(``shared_task`` in each app's ``tasks.py``) and the health page reach it without importing
``workers``; ``webapp/__init__.py`` imports it so a task queued from any web process goes to this
broker. The worker process starts from ``workers/celery_app.py``, which adds the workers' own
diagnostics tasks: ``celery -A workers.celery_app worker``.
"""

from __future__ import annotations

import os

from celery import Celery
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("rft_studio")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()  # each Django app's tasks.py


def same_queue(task) -> str:
    """The queue ``task`` (a bound task, running) was delivered from, else ``RFT_RUNS_QUEUE``:
    a task that re-enqueues itself stays there, so a worker serving one queue (a test's, or a
    host's that sees the checkpoint storage) keeps its runs and evaluations."""
    info = task.request.delivery_info or {}
    return info.get("routing_key") or settings.RFT_RUNS_QUEUE
