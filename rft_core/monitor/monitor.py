"""The Monitor a role (explorer, trainer, launcher) writes its metrics and status through.

``build_monitor`` picks the sinks: JSONL always, TensorBoard unless ``monitor.monitor_type`` is
``none``, W&B or MLflow when it asks for them, and the Redis event stream when the dashboard launched
the run (env ``RFT_EVENTS_REDIS_URL`` + ``RFT_REDIS_PREFIX`` + ``RFT_RUN_ID``); that run also gets a heartbeat every
``RFT_HEARTBEAT_S`` seconds (default 10) so the dashboard can tell a live run from a dead one.
With ``system_metrics_interval`` > 0 (``monitor.system_metrics_interval``) the monitor also writes
the actor's CPU, memory and GPU metrics as ``system/<role>/...`` (``rft_core.monitor.system``).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rft_core.errors import ConfigError
from rft_core.monitor.events import (
    ENV_HEARTBEAT_S,
    ENV_REDIS_PREFIX,
    ENV_REDIS_URL,
    ENV_RUN_ID,
    PHASES,
    RUN_ID_RE,
    MonitorEvent,
    redis_prefix,
)
from rft_core.monitor.sinks import (
    JsonlSink,
    MlflowSink,
    RedisStreamSink,
    Sink,
    TensorBoardSink,
    WandbSink,
    backend_missing,
)
from rft_core.monitor.system import SystemMetricsThread
from rft_core.registry import Registry

# ``monitor.monitor_type``: the sinks a type adds to the JSONL file (always written) and the
# event stream (when the dashboard launched the run), built from (monitor_dir, role, run_name,
# monitor_args). The config's choices are these names (``rft_core.config.registered``); in
# registration order, the default first.
SinkFactory = Callable[[Path, str, str, dict[str, Any]], list[Sink]]
MONITORS: Registry[SinkFactory] = Registry("monitor type", "monitor.monitor_type", sort_names=False)


@MONITORS.register("tensorboard")
def _tensorboard(monitor_dir: Path, role: str, run_name: str, args: dict[str, Any]) -> list[Sink]:
    return [TensorBoardSink(monitor_dir, role)]


@MONITORS.register("wandb")
def _wandb(monitor_dir: Path, role: str, run_name: str, args: dict[str, Any]) -> list[Sink]:
    return [TensorBoardSink(monitor_dir, role), WandbSink(monitor_dir, role, run_name, args)]


@MONITORS.register("mlflow")
def _mlflow(monitor_dir: Path, role: str, run_name: str, args: dict[str, Any]) -> list[Sink]:
    return [TensorBoardSink(monitor_dir, role), MlflowSink(monitor_dir, role, run_name, args)]


@MONITORS.register("none")
def _none(monitor_dir: Path, role: str, run_name: str, args: dict[str, Any]) -> list[Sink]:
    return []


class Monitor:
    """Fans each event out to every sink; safe to call from several threads."""

    def __init__(self, sinks: list[Sink], role: str, run_id: str, stage: str = ""):
        self.sinks = sinks
        self.role = role
        self.run_id = run_id
        self.stage = stage
        # Reentrant: a sink that logs a warning while writing comes back here via MonitorLogHandler.
        self._lock = threading.RLock()
        self._closed = False
        self._heartbeat_stop = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None
        self._phase: tuple[str, int | None] | None = None  # (phase, step) last sent
        self._system: Any = None  # a SystemMetricsThread while system metrics are on
        self.last_step = 0  # the step the latest metrics carried (system metrics are put there)

    def _emit(self, kind: str, data: dict[str, Any], step: int | None = None) -> None:
        event = MonitorEvent(
            run_id=self.run_id, kind=kind, role=self.role, step=step, data=data, stage=self.stage
        )
        with self._lock:
            if self._closed:
                return
            for sink in self.sinks:
                sink.write(event)

    def log(self, metrics: dict[str, float], step: int) -> None:
        if step is not None and not next(iter(metrics), "").startswith("system/"):
            self.last_step = max(self.last_step, int(step))
        self._emit("metric", {k: float(v) for k, v in metrics.items()}, step)

    def start_system_metrics(self, interval_s: float) -> None:
        """``system/<role>/...`` metrics (CPU, memory, GPUs: ``rft_core.monitor.system``) every
        ``interval_s`` seconds until close(); 0 or less: none."""
        if interval_s <= 0 or self._system is not None:
            return

        self._system = SystemMetricsThread(
            self.role, interval_s, lambda metrics: self.log(metrics, self.last_step)
        )
        self._system.start()

    def log_line(self, text: str, level: str = "INFO") -> None:
        self._emit("log", {"level": level, "text": text})

    def checkpoint_saved(self, step: int, path: str) -> None:
        self._emit("checkpoint", {"path": str(path)}, step)

    def status(self, state: str, message: str = "") -> None:
        self._emit("status", {"state": state, "message": message})

    def samples(self, samples: list[dict[str, Any]], step: int) -> None:
        """A few rollouts of ``step`` for the dashboard: each ``{prompt, response, truth,
        reward, ...}`` (the reward parts beside them)."""
        if samples:
            self._emit("samples", {"samples": [dict(s) for s in samples]}, step)

    def phase(self, phase: str, step: int | None = None) -> None:
        """What the role does from now on (one of ``PHASES``), and at which step: sent only when
        either changes (a loop may call it every step), so the page's "training (step N)"
        follows each step, not only each change of phase."""
        if phase not in PHASES:
            raise ValueError(f"phase {phase!r} is not one of {', '.join(PHASES)}")
        if (phase, step) == self._phase:
            return
        self._phase = (phase, step)
        self._emit("phase", {"phase": phase}, step)

    def heartbeat(self) -> None:
        self._emit("heartbeat", {})

    def start_heartbeat(self, interval_s: float) -> None:
        """Emit a heartbeat every ``interval_s`` from a daemon thread until close(): the
        dashboard marks a run dead when its heartbeats stop."""
        if self._heartbeat_thread is not None:
            return

        def beat() -> None:
            while not self._heartbeat_stop.wait(interval_s):
                self.heartbeat()

        self.heartbeat()
        self._heartbeat_thread = threading.Thread(
            target=beat, name="monitor-heartbeat", daemon=True
        )
        self._heartbeat_thread.start()

    def close(self) -> None:
        if self._system is not None:
            self._system.stop()
        self._heartbeat_stop.set()
        if self._heartbeat_thread is not None:
            self._heartbeat_thread.join(timeout=5)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for sink in self.sinks:
                sink.close()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def build_monitor(
    monitor_type: str,
    monitor_args: dict,
    job_dir: Path,
    role: str,
    run_name: str,
    stage: str = "",
    system_metrics_interval: float = 0.0,
) -> Monitor:
    extra_sinks = MONITORS.get((monitor_type or "tensorboard").lower())
    monitor_dir = Path(job_dir) / "monitor"
    sinks: list[Sink] = [JsonlSink(monitor_dir, role)]
    sinks.extend(extra_sinks(monitor_dir, role, run_name, dict(monitor_args or {})))

    run_id = os.environ.get(ENV_RUN_ID) or run_name
    redis_url = os.environ.get(ENV_REDIS_URL)
    if redis_url:
        _check_run_id(run_id)
        sinks.append(RedisStreamSink(redis_url, run_id, _prefix()))
    monitor = Monitor(sinks, role=role, run_id=run_id, stage=stage)
    if redis_url:
        monitor.start_heartbeat(float(os.environ.get(ENV_HEARTBEAT_S, "10")))
    monitor.start_system_metrics(float(system_metrics_interval or 0))
    return monitor


def _prefix() -> str:
    try:
        return redis_prefix()
    except ValueError as err:
        raise ConfigError("", str(err), value=os.environ.get(ENV_REDIS_PREFIX)) from None


def _check_run_id(run_id: str) -> None:
    if not RUN_ID_RE.match(run_id):
        raise ConfigError(
            ENV_RUN_ID,
            f"run id {run_id!r} must be 1-80 characters of letters, digits, '.', '_' or '-'",
            value=run_id,
        )


def check_monitor(monitor_type: str, run_name: str) -> None:
    """What ``build_monitor`` would refuse inside an actor, checked before any actor starts: a
    W&B/MLflow package that is not installed, a bad run id or an unreachable Redis stream."""
    kind = (monitor_type or "tensorboard").lower()
    if kind in ("wandb", "mlflow"):
        try:
            importlib.import_module(kind)
        except ImportError:
            raise backend_missing(kind) from None
    redis_url = os.environ.get(ENV_REDIS_URL)
    if redis_url:
        run_id = os.environ.get(ENV_RUN_ID) or run_name
        _check_run_id(run_id)
        RedisStreamSink(redis_url, run_id, _prefix()).close()  # ServiceUnavailable when unreachable


# metric names (substrings) a step's log line shows, in this order, when the step has them
_SUMMARY_KEYS = ("reward/mean", "accuracy/mean", "loss", "grad_norm", "entropy", "kl")
_SUMMARY_MAX = 6


def step_summary(metrics: dict[str, float]) -> str:
    """A step's metrics in one log line: the rewards, accuracies, losses, grad norm, entropy
    and KL it has (up to six, ``name=value``), then the step's seconds (``time/*`` summed)."""
    shown: list[str] = []
    for key in _SUMMARY_KEYS:
        for name in sorted(metrics):
            if key in name and name not in shown and not name.startswith(("time/", "system/")):
                shown.append(name)
    parts = [f"{name}={float(metrics[name]):.4g}" for name in shown[:_SUMMARY_MAX]]
    seconds = sum(float(v) for k, v in metrics.items() if k.startswith("time/"))
    if seconds:
        parts.append(f"{seconds:.1f}s")
    return ", ".join(parts) or f"{len(metrics)} metrics"


class MonitorLogHandler(logging.Handler):
    """Forwards log records to ``monitor.log_line`` (the dashboard's live log view)."""

    def __init__(self, monitor: Monitor, level: int = logging.INFO):
        super().__init__(level)
        self.monitor = monitor
        self._local = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(self._local, "busy", False):  # a sink logging about itself must not recurse
            return
        self._local.busy = True
        try:
            self.monitor.log_line(self.format(record), record.levelname)
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.handleError(record)
        finally:
            self._local.busy = False
