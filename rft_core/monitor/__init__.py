"""Run monitoring: metrics, log lines, checkpoints, status and heartbeats.

    monitor = build_monitor("tensorboard", {}, job_dir, role="trainer", run_name="demo")
    monitor.log({"actor/pg_loss": 0.12}, step=3)

See ``events.py`` for the Redis stream format the dashboard consumes; the names both sides use
(``ENV_REDIS_URL``, ``ENV_REDIS_PREFIX``, ``ENV_RUN_ID``, ``stream_key``, ``runs_set``) are defined
there once.
"""

from rft_core.monitor.events import (
    ENV_HEARTBEAT_S,
    ENV_REDIS_PREFIX,
    ENV_REDIS_URL,
    ENV_RUN_ID,
    KINDS,
    RUN_ID_RE,
    MonitorEvent,
    check_redis_prefix,
    redis_prefix,
    run_id_of,
    runs_set,
    stream_key,
    stream_prefix,
)
from rft_core.monitor.monitor import (
    MONITORS,
    Monitor,
    MonitorLogHandler,
    build_monitor,
)

__all__ = [
    "ENV_HEARTBEAT_S",
    "ENV_REDIS_PREFIX",
    "ENV_REDIS_URL",
    "ENV_RUN_ID",
    "KINDS",
    "MONITORS",
    "RUN_ID_RE",
    "Monitor",
    "MonitorEvent",
    "MonitorLogHandler",
    "build_monitor",
    "check_redis_prefix",
    "redis_prefix",
    "run_id_of",
    "runs_set",
    "stream_key",
    "stream_prefix",
]
