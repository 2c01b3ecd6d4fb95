"""Small tasks that prove the worker path end to end (used by the health page and tests)."""

from __future__ import annotations

import os
import socket

from workers.celery_app import app


@app.task(name="workers.ping")
def ping() -> dict:
    return {"pong": True, "host": socket.gethostname(), "pid": os.getpid()}


@app.task(name="workers.add")
def add(x: float, y: float) -> float:
    return x + y


@app.task(name="workers.database_name")
def database_name() -> str:
    """The database this worker writes to (diagnostics: it must be the web's database)."""
    from django.db import connection

    return str(connection.settings_dict["NAME"])
