"""``trinity run``: load the config, check what a run needs, start Ray actors, run every stage.

    cli_run(args) -> int                 # argparse namespace: config, dry_run, overrides
    run_experiment(cfg) -> RunResult     # the same from a Config (the dashboard's Ray job too)

Ray: joins ``RAY_ADDRESS`` / ``cluster.ray_address`` when given, else starts a local Ray for the
run and shuts it down at the end. Modes: ``both`` (explorer + trainer + synchronizer actors),
``explore`` + ``train`` (Trinity's async pair: two jobs, one job dir, meeting only at the
experience buffer's path and the checkpoint tree, so each may have its own Ray; see
``rft_core.sync.checkpoint_watch``), ``bench`` (evaluate every saved ``global_step_*`` in order)
and ``colocate`` (explorer and trainer driven in one actor on one GPU by
``rft_core.runtime.in_process``, weights handed over in memory). Stages run in order, each in its own
job dir; stage i+1 starts from stage i's last ``global_step_N/actor/huggingface``; a finished
stage (``stage_meta.json``) is skipped on rerun.

What this module owns: the order of the stages, the run's name (a renamed job dir), Ray's
start and end, the stage metadata, and ``trinity run``'s command line. What a run needs is
checked first by ``rft_core.runtime.preflight`` (every stage, before Ray starts); each stage's
actors are run by ``rft_core.runtime.stage``. The config is validated once, when it is loaded;
the stages it resolved are reused here.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import ray

from rft_core.checkpoint.layout import (
    RUN_CONFIG,
    STAGE_META,
    hf_dir,
    latest_checkpoint_step,
    read_stage_meta,
    step_dir,
    write_run_meta,
    write_stage_meta,
    write_text_atomic,
)
from rft_core.config import Config, config_to_yaml, load_config, resolve_stages
from rft_core.config.registered import check_registered_names
from rft_core.monitor import dashboard
from rft_core.plugins import export_plugin_dirs, load_plugins, plugin_dirs_from_env
from rft_core.registries import registered_names_table
from rft_core.runtime import run_log
from rft_core.runtime.preflight import check_joined_cluster, dry_run_checks, preflight
from rft_core.runtime.ray_cluster import ray_address, start_ray
from rft_core.runtime.stage import StageResult, run_stage

log = logging.getLogger("rft_core.launcher")


@dataclass
class RunResult:
    stages: list[StageResult] = field(default_factory=list)
    renamed_from: str | None = None  # job dir name when continue_from_checkpoint: false renamed it
    ray_address: str | None = None  # the Ray cluster the run joined (None: a local Ray of its own)
    wall_time_s: float = 0.0

    @property
    def last(self) -> StageResult:
        return self.stages[-1]


# -- stages in order ---------------------------------------------------------------------------


def _engine_pool_cpus(stages: list[Any]) -> int:
    """CPUs the engine pools of ``stages`` reserve on a CPU-only local Ray (one per engine; the
    other actors reserve none), so a local Ray can place them all instead of waiting forever."""
    return max(
        (
            s.explorer.rollout_model.engine_num
            for s in stages
            if s.explorer.rollout_model.engine_num > 1 and s.cluster.gpu_per_node == 0
        ),
        default=0,
    )


def _latest_hf_dir(job_dir: Path) -> Path | None:
    step = latest_checkpoint_step(job_dir)
    if step is None:
        return None
    hf = hf_dir(step_dir(job_dir, step))
    return hf if (hf / "config.json").exists() else None


def _rename_if_occupied(cfg: Config) -> str | None:
    """Trinity's rule for ``continue_from_checkpoint: false`` with a non-empty job dir: run as
    ``<name>_<timestamp>``. We say so loudly (stderr, log, run metadata)."""
    job_dir = Path(cfg.job_dir)
    if cfg.continue_from_checkpoint or not job_dir.is_dir() or not any(job_dir.iterdir()):
        return None
    old = cfg.name
    cfg.name = f"{old}_{datetime.now().strftime('%Y%m%d%H%M%S')}"
    for stage in cfg.__dict__.get("_stages", []):  # the stages validated at load: renamed too
        stage.name = cfg.name
    message = (
        f"continue_from_checkpoint is false and {job_dir} is not empty: this run is named "
        f"{cfg.name!r} (job dir {cfg.job_dir}); the old job dir is left untouched"
    )
    print(f"trinity run: WARNING: {message}", file=sys.stderr)
    log.warning(message)
    return old


def run_experiment(cfg: Config, on_job_dir: Callable[[Any], None] | None = None) -> RunResult:
    """Run every stage of ``cfg`` in order on Ray. Raises RFTError subclasses on user errors and
    ActorFailed when an actor fails. ``on_job_dir(cfg)`` is called once the run's name and job
    dir are final (a renamed run's) and its preflight passed, before Ray starts."""
    started = time.perf_counter()
    check_registered_names(cfg, registered_names_table())  # before anything is renamed or started
    result = RunResult()
    result.renamed_from = _rename_if_occupied(cfg)
    stages = resolve_stages(cfg)
    # each stage's datasets, read once here and handed to its actors
    datasets = [preflight(stage, check_model=i == 0) for i, stage in enumerate(stages)]
    if on_job_dir is not None:
        on_job_dir(cfg)
    own_ray = False
    try:
        previous_hf: Path | None = None
        for i, stage in enumerate(stages):
            stage_datasets, datasets[i] = datasets[i], None  # not kept past its stage
            job_dir = Path(stage.job_dir)
            if previous_hf is not None:
                stage.model.model_path = str(previous_hf)
            meta = read_stage_meta(job_dir) if stage.stage_name else None
            if meta and meta.get("finished") and stage.continue_from_checkpoint:
                log.warning(
                    "stage %s already finished (%s): skipped",
                    stage.stage_name,
                    job_dir / STAGE_META,
                )
                result.stages.append(
                    StageResult(stage.stage_name, str(job_dir), stage.mode, skipped=True)
                )
            else:
                # Ray only once a stage has work: a rerun of a finished run starts none
                own_ray = start_ray(cfg, min_cpus=_engine_pool_cpus(stages)) or own_ray
                if ray_address(stage):
                    result.ray_address = ray_address(stage)
                    log.info("joined the Ray cluster at %s", result.ray_address)
                    check_joined_cluster(
                        stage, ray.cluster_resources().get("GPU", 0), ray_address(stage)
                    )
                result.stages.append(run_stage(stage, stage_datasets))
            if stage.stage_name:
                previous_hf = _latest_hf_dir(job_dir) or previous_hf
                meta = {
                    "stage_name": stage.stage_name,
                    "finished": True,
                    "mode": stage.mode,
                    "hf_dir": str(previous_hf) if previous_hf else None,
                    "renamed_from": result.renamed_from,
                }
                write_stage_meta(job_dir, meta)
            if result.renamed_from:
                write_run_meta(job_dir, {"renamed_from": result.renamed_from, "name": cfg.name})
    finally:
        if own_ray:
            ray.shutdown()
    result.wall_time_s = time.perf_counter() - started
    return result


def cli_run(args: argparse.Namespace) -> int:
    """``trinity run --config X [--plugin-dir DIR ...] [--dry-run] [--quiet] [key=value ...]``."""
    quiet = bool(getattr(args, "quiet", False))
    run_log.configure(quiet=quiet)  # the config's warnings in the log's shape too
    own_dirs = list(getattr(args, "plugin_dir", None) or ())
    load_plugins([*own_dirs, *plugin_dirs_from_env()])
    export_plugin_dirs(own_dirs)  # the run's actors load them too
    cfg = load_config(args.config, list(getattr(args, "overrides", None) or ()))
    run_log.configure(cfg.log.level, quiet)
    if getattr(args, "dry_run", False):
        check_registered_names(cfg, registered_names_table())
        for note in dry_run_checks(cfg):  # the data checks of the run's start
            print(
                f"dry run: not checked here, checked when the run starts: {note}",
                file=sys.stderr,
            )
        print(config_to_yaml(cfg), end="")
        return 0

    registered: list[dashboard.Registration] = []

    def started(final: Any) -> None:
        text = config_to_yaml(final)
        Path(final.job_dir).mkdir(parents=True, exist_ok=True)
        write_text_atomic(Path(final.job_dir) / RUN_CONFIG, text)  # what an import reads
        # RFT_DASHBOARD_URL + RFT_API_TOKEN: the run registers itself and streams there
        registration = dashboard.register(text, Path(final.job_dir))
        if registration is not None:
            registered.append(registration)

    with dashboard.reporting(registered):
        result = run_experiment(cfg, on_job_dir=started)
    for stage in result.stages:
        label = stage.stage_name or cfg.name
        if stage.skipped:
            print(f"{label}: skipped (finished earlier)")
            continue
        parts = [
            f"{label}: mode {stage.mode}",
            f"{stage.wall_time_s:.1f}s",
            f"job dir {stage.job_dir}",
        ]
        if result.ray_address:
            parts.append(f"Ray cluster {result.ray_address}")
        if stage.trainer:
            parts.insert(1, f"{stage.trainer['steps']} trainer steps")
        if stage.explorer:
            parts.insert(1, f"{stage.explorer['steps']} explorer steps")
        print(", ".join(parts))
    return 0


__all__ = ["RunResult", "cli_run", "run_experiment"]
