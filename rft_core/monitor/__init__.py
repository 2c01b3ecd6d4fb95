"""Run monitoring: metrics, log lines, checkpoints, status and heartbeats.

    monitor = build_monitor("tensorboard", {}, job_dir, role="trainer", run_name="demo")
    monitor.log({"actor/pg_loss": 0.12}, step=3)

See ``events.py`` for the Redis stream format the dashboard consumes.
"""

from rft_core.monitor.events import KINDS, RUNS_SET, STREAM_PREFIX, MonitorEvent, stream_key
from rft_core.monitor.monitor import (
    ENV_REDIS_URL,
    ENV_RUN_ID,
    MONITOR_TYPES,
    Monitor,
    MonitorLogHandler,
    build_monitor,
)

__all__ = [
    "ENV_REDIS_URL",
    "ENV_RUN_ID",
    "KINDS",
    "MONITOR_TYPES",
    "RUNS_SET",
    "STREAM_PREFIX",
    "Monitor",
    "MonitorEvent",
    "MonitorLogHandler",
    "build_monitor",
    "stream_key",
]
