"""The Celery app: broker and result backend on REDIS_URL, settings from Django's CELERY_*."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("rft_studio")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Tasks live in workers/tasks.py and in each Django app's tasks.py.
app.autodiscover_tasks(["workers"])
app.autodiscover_tasks()
