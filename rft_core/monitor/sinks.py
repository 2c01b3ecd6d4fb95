"""Where monitor events go. A sink takes :class:`MonitorEvent` objects and keeps the kinds it
understands: files and TensorBoard keep metrics, Redis keeps everything the dashboard shows.

``wandb`` and ``mlflow`` are imported only when a config asks for them; when the package is
missing the run stops before it starts with :class:`EngineUnavailable` saying how to install it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from pathlib import Path
from typing import Any, Protocol

import redis

from rft_core.errors import EngineUnavailable, ServiceUnavailable
from rft_core.monitor.events import MonitorEvent, runs_set, stream_key

logger = logging.getLogger(__name__)


class Sink(Protocol):
    def write(self, event: MonitorEvent) -> None: ...

    def close(self) -> None: ...


def _finite(metrics: dict[str, float]) -> dict[str, float]:
    """NaN/inf are kept in JSON as null so that one bad value does not break a reader."""
    return {k: (v if math.isfinite(v) else None) for k, v in metrics.items()}


def _finite_values(row: dict[str, Any]) -> dict[str, Any]:
    """NaN/inf floats of a row as null (the other values as they are)."""
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()
    }


def is_system_metrics(data: dict) -> bool:
    """A metric event of ``system/*`` metrics only (``rft_core.monitor.system``)."""
    return bool(data) and all(str(k).startswith("system/") for k in data)


class JsonlSink:
    """``monitor/<role>_metrics.jsonl`` (one line per metric event: step, time, metrics),
    ``monitor/<role>_events.jsonl`` (status and checkpoint events) and
    ``monitor/<role>_samples.jsonl`` (one line per sampled rollout: step, time, prompt,
    response, truth, reward, ...; opened on the first one) and ``monitor/<role>_system.jsonl``
    (the ``system/*`` metrics of ``rft_core.monitor.system``, timed, not one per step: kept out
    of the metrics file, whose lines readers take as one per step)."""

    def __init__(self, monitor_dir: Path, role: str):
        monitor_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = monitor_dir / f"{role}_metrics.jsonl"
        self.events_path = monitor_dir / f"{role}_events.jsonl"
        self._metrics = self.metrics_path.open("a", encoding="utf-8")
        self._events = self.events_path.open("a", encoding="utf-8")
        self.samples_path = monitor_dir / f"{role}_samples.jsonl"
        self._samples = None
        self.system_path = monitor_dir / f"{role}_system.jsonl"
        self._system = None

    def _system_file(self):
        if self._system is None:
            self._system = self.system_path.open("a", encoding="utf-8")
        return self._system

    def write(self, event: MonitorEvent) -> None:
        if event.kind == "metric":
            line = {"step": event.step, "time": event.ts, **_finite(event.data)}
            out = self._system_file() if is_system_metrics(event.data) else self._metrics
            out.write(json.dumps(line) + "\n")
            out.flush()
        elif event.kind in ("status", "checkpoint"):
            line = {"kind": event.kind, "step": event.step, "time": event.ts, **event.data}
            self._events.write(json.dumps(line) + "\n")
            self._events.flush()
        elif event.kind == "samples":
            if self._samples is None:
                self._samples = self.samples_path.open("a", encoding="utf-8")
            for sample in event.data.get("samples", []):
                line = {"step": event.step, "time": event.ts, **_finite_values(sample)}
                self._samples.write(json.dumps(line, default=str) + "\n")
            self._samples.flush()

    def close(self) -> None:
        self._metrics.close()
        self._events.close()
        if self._samples is not None:
            self._samples.close()
        if self._system is not None:
            self._system.close()


class TensorBoardSink:
    """Scalars under ``monitor/tensorboard/<role>/``, one tag per metric name."""

    def __init__(self, monitor_dir: Path, role: str):
        # torch-free slice: the web process imports rft_core.monitor
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = monitor_dir / "tensorboard" / role
        self._writer = SummaryWriter(log_dir=str(self.log_dir))

    def write(self, event: MonitorEvent) -> None:
        if event.kind == "metric":
            for name, value in event.data.items():
                self._writer.add_scalar(name, value, global_step=event.step, walltime=event.ts)
        elif event.kind == "checkpoint":
            self._writer.flush()

    def close(self) -> None:
        self._writer.flush()
        self._writer.close()


class RedisStreamSink:
    """XADD every event to ``rft:<prefix>:run:<run_id>`` for the dashboard's ingestor.

    Switched on by ``RFT_EVENTS_REDIS_URL`` and ``RFT_RUN_ID`` (with ``RFT_REDIS_PREFIX``, the
    dashboard's deployment prefix), which the dashboard sets when it launches a run. Unreachable at start -> ServiceUnavailable. A write that fails mid-run is
    logged and dropped: the JSONL file stays the complete record and training goes on.
    """

    def __init__(self, url: str, run_id: str, prefix: str, *, maxlen: int = 200_000):
        self.url = url
        self.run_id = run_id
        self.key = stream_key(run_id, prefix)
        self.runs_set = runs_set(prefix)
        self.maxlen = maxlen
        self.dropped = 0
        self._lock = threading.Lock()
        self._client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        try:
            self._client.sadd(self.runs_set, run_id)
        except redis.RedisError as err:
            raise ServiceUnavailable(
                f"Redis event stream at RFT_EVENTS_REDIS_URL={url} is unreachable ({err}); "
                "start Redis or unset RFT_EVENTS_REDIS_URL to run without the dashboard"
            ) from err

    def write(self, event: MonitorEvent) -> None:
        try:
            with self._lock:
                self._client.xadd(self.key, event.to_fields(), maxlen=self.maxlen, approximate=True)
        except redis.RedisError as err:
            self.dropped += 1
            if self.dropped == 1:
                logger.warning(
                    "monitor: dropping events for %s, Redis write failed: %s", self.key, err
                )

    def close(self) -> None:
        self._client.close()


def backend_missing(package: str) -> EngineUnavailable:
    """The error for ``monitor.monitor_type: <package>`` when the package is not installed."""
    return EngineUnavailable(
        f"monitor.monitor_type: {package} needs the {package} package; `pip install {package}` "
        "or set monitor.monitor_type: tensorboard"
    )


class WandbSink:
    """A W&B run per role (``<run_name>_<role>``, grouped by run name) under
    ``monitor/wandb/``; ``monitor_args``: ``project``, ``entity``, ``group``, ``config``,
    ``mode`` (``offline`` logs locally; ``WANDB_MODE`` does the same for every run)."""

    def __init__(self, monitor_dir: Path, role: str, run_name: str, args: dict[str, Any]):
        try:
            import wandb
        except ImportError as err:
            raise backend_missing("wandb") from err
        self._wandb = wandb
        self._run = wandb.init(
            project=args.get("project") or run_name.split("/")[0],
            entity=args.get("entity"),
            group=args.get("group", run_name),
            name=f"{run_name}_{role}",
            dir=str(monitor_dir),
            config=args.get("config"),
            mode=args.get("mode"),
            # the explorer and the trainer may share a process (an in-process run): one run each
            reinit="create_new",
        )
        self.run_dir = Path(self._run.dir).parent

    def write(self, event: MonitorEvent) -> None:
        if event.kind == "metric":
            self._run.log(_finite(event.data), step=event.step)

    def close(self) -> None:
        self._run.finish()


class MlflowSink:
    """An MLflow run per role (``<run_name>_<role>``) in the experiment ``monitor_args.experiment``
    (or ``project``, else the run's project), at the tracking URI ``monitor_args.uri``; without
    one, a local file store ``monitor/mlruns``. Written through ``MlflowClient``, not the fluent
    API, so two roles in one process do not share MLflow's one active run.

    The file store is MLflow's local store without a database (``mlflow-skinny`` has no SQL
    backend); MLflow 3 asks for ``MLFLOW_ALLOW_FILE_STORE=true`` to use it, which this sink sets
    for a ``file:`` URI unless the environment already says otherwise."""

    def __init__(self, monitor_dir: Path, role: str, run_name: str, args: dict[str, Any]):
        try:
            import mlflow  # noqa: F401
            from mlflow.tracking import MlflowClient
        except ImportError as err:
            raise backend_missing("mlflow") from err

        uri = str(args.get("uri") or (Path(monitor_dir) / "mlruns").absolute().as_uri())
        if uri.startswith("file:") or "://" not in uri:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.tracking_uri = uri
        self._client = MlflowClient(tracking_uri=uri)
        name = args.get("experiment") or args.get("project") or run_name.split("/")[0]
        found = self._client.get_experiment_by_name(name)
        experiment_id = found.experiment_id if found else self._client.create_experiment(name)
        self._run_id = self._client.create_run(
            experiment_id, run_name=f"{run_name}_{role}"
        ).info.run_id

    @property
    def run_id(self) -> str:
        return self._run_id

    def write(self, event: MonitorEvent) -> None:
        if event.kind != "metric":
            return
        from mlflow.entities import Metric  # optional: mlflow (checked when the sink was built)

        ts = int(event.ts * 1000)
        step = event.step or 0
        metrics = [
            Metric(name, value, ts, step)
            for name, value in _finite(event.data).items()
            if value is not None
        ]
        if metrics:
            self._client.log_batch(self._run_id, metrics=metrics)

    def close(self) -> None:
        self._client.set_terminated(self._run_id)
