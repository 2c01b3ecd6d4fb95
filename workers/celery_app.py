"""The worker's entry point: ``celery -A workers.celery_app worker`` (and ``beat``). The app is
the dashboard's (``webapp/celery.py``: broker and result backend on REDIS_URL, settings from
Django's CELERY_*, the web apps' tasks); the workers add their own diagnostics tasks
(``workers/diagnostics.py``: Celery finds it as the package's task module named here)."""

from __future__ import annotations

from webapp.celery import app

app.autodiscover_tasks(["workers"], related_name="diagnostics")

__all__ = ["app"]
