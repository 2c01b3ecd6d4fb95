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
