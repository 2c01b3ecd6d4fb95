"""Run monitoring: metrics, log lines, checkpoints, status and heartbeats.

    monitor = build_monitor("tensorboard", {}, job_dir, role="trainer", run_name="demo")
    monitor.log({"actor/pg_loss": 0.12}, step=3)

See ``events.py`` for the Redis stream format the dashboard consumes; the names both sides use
(``ENV_REDIS_URL``, ``ENV_RUN_ID``, ``STREAM_PREFIX``, ``RUNS_SET``) are defined there once.
"""

from rft_core.monitor.events import (
    ENV_HEARTBEAT_S,
    ENV_REDIS_URL,
    ENV_RUN_ID,
    ENV_SAMPLES_PER_STEP,
    KINDS,
    RUN_ID_RE,
    RUNS_SET,
    STREAM_PREFIX,
    MonitorEvent,
    run_id_of,
    stream_key,
)
from rft_core.monitor.monitor import (
    MONITORS,
    Monitor,
    MonitorLogHandler,
    build_monitor,
)

__all__ = [
    "ENV_HEARTBEAT_S",
    "ENV_REDIS_URL",
    "ENV_RUN_ID",
    "ENV_SAMPLES_PER_STEP",
    "KINDS",
    "MONITORS",
    "RUNS_SET",
    "RUN_ID_RE",
    "STREAM_PREFIX",
    "Monitor",
    "MonitorEvent",
    "MonitorLogHandler",
    "build_monitor",
    "run_id_of",
    "stream_key",
]
