"""RFT Studio dashboard: the Django project (settings, urls, ASGI) and its apps."""

from webapp.celery import app as celery_app

__all__ = ["celery_app"]
