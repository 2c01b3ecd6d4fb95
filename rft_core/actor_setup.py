"""What every actor of a run (the explorer, the trainer) does when it starts, in one place.

``RunActor.__init__`` holds the attributes both share (config, role, job dir, monitor,
synchronizer, step) and calls :func:`setup_actor_logging`: the actor's log file
``job_dir/log/<role>.log`` with what the actor prints (``rft_core.actors.actor_log``), its monitor (metrics, status and log lines
for the dashboard), the Trinity keys the run ignores said again in that log, the user's plugins
(``TRINITY_PLUGIN_DIRS``, exported by ``trinity run``: an actor is a process of its own), torch
on every core of a CPU run, and no download progress bars. Actors import this module, never the launcher that
starts them.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch
from transformers.utils import logging as hf_logging

from rft_core.actors.actor_log import capture_output, log_to_file
from rft_core.config import Config
from rft_core.config.trinity_compat import log_unimplemented
from rft_core.monitor import build_monitor
from rft_core.monitor.monitor import MonitorLogHandler
from rft_core.plugins import load_plugins_from_env


def run_name(cfg: Config) -> str:
    """``project/name[/stage_name]``: the name a run's monitors report under."""
    return f"{cfg.project}/{cfg.name}" + (f"/{cfg.stage_name}" if cfg.stage_name else "")


class _NotUnder(logging.Filter):
    """Drops the records of one logger and its children (another role's, in one process)."""

    def __init__(self, name: str):
        super().__init__()
        self.excluded = name

    def filter(self, record: logging.LogRecord) -> bool:
        name = record.name
        return not (name == self.excluded or name.startswith(self.excluded + "."))


def setup_actor_logging(
    cfg: Config, role: str, logger_name: str = "rft_core", exclude_logger: str | None = None
) -> Any:
    """``job_dir/log/<role>.log`` for this actor's logger, and its monitor (metrics, status,
    log lines for the dashboard). Returns the monitor. ``exclude_logger``: records of that
    logger stay out of both (an explorer sharing its process with a trainer leaves the
    ``rft_core.trainer`` lines to the trainer's log)."""

    job_dir = Path(cfg.job_dir)
    path = job_dir / "log" / f"{role}.log"
    log_to_file(path, logger_name)
    logger = logging.getLogger(logger_name)
    monitor = build_monitor(
        cfg.monitor.monitor_type,
        cfg.monitor.monitor_args,
        job_dir,
        role,
        run_name(cfg),
        stage=cfg.stage_name or "",
        system_metrics_interval=cfg.monitor.system_metrics_interval,
    )
    handler = MonitorLogHandler(monitor)
    logger.addHandler(handler)
    # what the actor prints and the libraries' warnings and errors (transformers, torch, ray,
    # Python warnings) too: the run page's log is the actor's log, not only rft_core's lines
    capture_output(role, logger_name)
    if exclude_logger is not None:
        for h in logger.handlers:
            mine = isinstance(h, logging.FileHandler) and Path(h.baseFilename) == path.resolve()
            if h is handler or mine:
                h.addFilter(_NotUnder(exclude_logger))

    # Trinity keys this run accepts but ignores, in the run's own log (the validator's list)
    log_unimplemented(cfg._unimplemented)

    load_plugins_from_env()  # the workflows, rewards and losses the config names may be there
    _use_all_cores(cfg)

    hf_logging.disable_progress_bar()  # "Loading weights" bars from every actor drown the log
    return monitor


def _use_all_cores(cfg: Config) -> None:
    # Ray sets OMP_NUM_THREADS=1 in workers; a CPU run wants torch on every core it has
    if cfg.cluster.gpu_per_node == 0:
        torch.set_num_threads(max(1, os.cpu_count() or 1))


class RunActor:
    """The start every run actor shares; ``Explorer`` and ``Trainer`` build on it."""

    def __init__(
        self,
        cfg: Config,
        synchronizer: Any = None,
        role: str = "actor",
        logger_name: str = "rft_core",
        exclude_logger: str | None = None,
    ):
        self.cfg = cfg
        self.role = role
        self.job_dir = Path(cfg.job_dir)
        self.monitor = setup_actor_logging(cfg, role, logger_name, exclude_logger)
        self.synchronizer = synchronizer
        self.step = 0
