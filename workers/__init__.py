"""Background processes of the dashboard: the Celery app and its tasks, and the event ingestor."""
