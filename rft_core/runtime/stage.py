"""One stage of a run on Ray: its actors (explorer, trainer, synchronizer; or the in-process
pair of ``colocate``; or the explorer alone in ``bench``) placed by the job's placement group,
waiting for them with a progress bar, and the failure of any one as one ActorFailed naming the
role. ``rft_core.runtime.launcher`` runs the stages of a config in order through
:func:`run_stage`.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from tqdm import tqdm

from rft_core.actors.placement import JobPlacementGroup, job_placement_name
from rft_core.buffer.queue import actor_name
from rft_core.checkpoint.layout import latest_checkpoint_step, read_explorer_meta
from rft_core.config import Config
from rft_core.config.resources import gpu_split, job_placement, trainer_gpus, trainer_world_size
from rft_core.data.run_datasets import RunDatasets
from rft_core.errors import ActorFailed, ConfigError, RFTError
from rft_core.explorer.explorer import Explorer
from rft_core.rollout.pool import engine_pool_name, remove_engine_pool
from rft_core.runtime.in_process import InProcessRun, resume_point
from rft_core.runtime.run_log import StageLog, progress_shown
from rft_core.sync.synchronizer import start_synchronizer
from rft_core.trainer.trainer import Trainer, drop_stale_experiences

log = logging.getLogger("rft_core.launcher")


@dataclass
class StageResult:
    stage_name: str | None
    job_dir: str
    mode: str
    skipped: bool = False
    explorer: dict[str, Any] | None = None
    trainer: dict[str, Any] | None = None
    bench: dict[str, Any] | None = None
    wall_time_s: float = 0.0


def _actor(cls: type, name: str, cfg: Config, num_gpus: float = 0, **placed: Any) -> Any:
    return ray.remote(cls).options(
        name=name, num_cpus=0, num_gpus=num_gpus, max_concurrency=4, **placed
    )


def _wait_all(
    refs: dict[str, Any], actors: dict[str, Any], progress: Any, stage_log: StageLog
) -> dict[str, Any]:
    """Wait for every role's ``run`` ref, telling the run's log what the roles did each second;
    the first failure cancels the rest and raises ActorFailed naming the role and its error."""
    pending = dict(refs)
    results: dict[str, Any] = {}
    shown = next(r for r in ("explorer", "colocate", "trainer") if r in actors)
    while pending:
        done, _ = ray.wait(list(pending.values()), num_returns=1, timeout=1.0)
        for ref in done:
            role = next(r for r, x in pending.items() if x == ref)
            del pending[role]
            try:
                results[role] = ray.get(ref)
            except ray.exceptions.RayError as err:
                for actor in actors.values():
                    ray.kill(actor)
                cause = getattr(err, "cause", None) or err
                if isinstance(cause, RFTError) and not isinstance(cause, ActorFailed):
                    raise ActorFailed(f"{role} failed: {type(cause).__name__}: {cause}") from err
                logs = "explorer.log, log/trainer.log" if role == "colocate" else f"{role}.log"
                raise ActorFailed(f"{role} failed: {_one_line(cause)} (see log/{logs})") from err
        info: dict[str, Any] = {}
        if shown in pending:
            try:
                info = ray.get(actors[shown].progress.remote(), timeout=5)
            except ray.exceptions.GetTimeoutError:
                pass
        stage_log.poll(total=info.get("total"))
        if progress is not None and info:
            if info.get("total") and progress.total != info["total"]:
                progress.total = info["total"]  # known once the taskset is read
            progress.update(info["step"] - progress.n)
    return results


_RAY_NEVER_RAN = "The actor never ran"


def _one_line(err: BaseException) -> str:
    """The error's last line; for an actor that never started, Ray's reason before its note."""
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    if len(lines) > 1 and lines[-1].startswith(_RAY_NEVER_RAN):
        return f"{type(err).__name__}: {lines[-2]} ({lines[-1]})"
    return f"{type(err).__name__}: {lines[-1] if lines else ''}"


def _resume_step(cfg: Config) -> int | None:
    if not cfg.continue_from_checkpoint:
        return None
    return latest_checkpoint_step(Path(cfg.job_dir))


def _in_terminal() -> bool:
    """Progress as a bar: stderr is a terminal and the log is not quiet (else the run's log has
    progress lines, ``rft_core.runtime.run_log``)."""
    return sys.stderr.isatty() and progress_shown()


def _progress_bar(cfg: Config, start: int, role: str = "explorer") -> Any:
    """A tqdm bar of the role's steps (in a terminal)."""
    label = cfg.stage_name or cfg.name
    return tqdm(
        total=cfg.buffer.total_steps, initial=start, desc=f"{label} {role} steps", unit="step"
    )


def run_stage(cfg: Config, datasets: RunDatasets | None = None) -> StageResult:
    """Run one stage (or a config without stages) to the end of its data; ``datasets``: what
    its preflight read, handed to the actors (else they read their datasets themselves)."""
    try:
        return _run_stage(cfg, datasets)
    finally:
        _kill_queue(cfg)


def _kill_queue(cfg: Config) -> None:
    """The queue actor outlives its users; a rerun in the same Ray must get a fresh one."""
    eb = cfg.buffer.trainer_input.experience_buffer
    if eb is None or eb.storage_type != "queue":
        return
    try:
        ray.kill(ray.get_actor(actor_name(eb.name, Path(cfg.job_dir))))
    except ValueError:
        pass  # never started


def _run_stage(cfg: Config, datasets: RunDatasets | None) -> StageResult:
    start = time.perf_counter()
    job_dir = Path(cfg.job_dir)
    for sub in ("buffer", "log", "monitor"):
        (job_dir / sub).mkdir(parents=True, exist_ok=True)
    result = StageResult(cfg.stage_name, str(job_dir), cfg.mode)
    resume = _resume_step(cfg)
    if resume is not None:
        log.warning("resuming %s from global_step_%d", job_dir, resume)
    # the explorer's and the trainer ranks' GPUs (rft_core/config/resources.py job_placement)
    placed = JobPlacementGroup(job_placement(cfg), job_placement_name(str(job_dir)))
    actors: dict[str, Any] = {}
    bar = None
    try:
        with StageLog(cfg, progress_lines=not _in_terminal()) as stage_log:
            refs, first = _start_roles(cfg, datasets, resume, placed, actors)
            if first is not None and _in_terminal():
                bar = _progress_bar(cfg, first, "trainer" if cfg.mode == "train" else "explorer")
            out = _wait_all(refs, actors, bar, stage_log)
    finally:
        if bar is not None:
            bar.close()
        for actor in actors.values():
            ray.kill(actor)
        placed.remove()
        if cfg.explorer.rollout_model.engine_num > 1:
            remove_engine_pool(engine_pool_name(job_dir))  # a killed explorer leaves its own
    out.update(out.pop("colocate", {}))  # the in-process run's {"explorer", "trainer"}
    result.trainer, result.explorer = out.get("trainer"), out.get("explorer")
    if cfg.mode == "bench":
        result.bench, result.explorer = result.explorer, None
    result.wall_time_s = time.perf_counter() - start
    return result


def _start_roles(
    cfg: Config,
    datasets: RunDatasets | None,
    resume: int | None,
    placed: JobPlacementGroup,
    actors: dict[str, Any],
) -> tuple[dict[str, Any], int | None]:
    """Start the mode's actors (into ``actors``, so that a failure here still kills those
    started) and their ``run``; returns the refs by role and the step a progress bar starts at
    (None: no bar, as in ``bench``)."""
    job_dir = Path(cfg.job_dir)
    prefix = f"{cfg.project}/{cfg.name}/{cfg.stage_name or ''}"
    mode = cfg.mode
    explorer_gpus = gpu_split(cfg)[0]
    # several trainer ranks: this actor is rank 0 on one GPU, each other rank has one of its own
    rank0_gpus = (
        1 if trainer_world_size(cfg) > 1 and cfg.cluster.gpu_per_node else trainer_gpus(cfg)
    )
    tasksets = datasets.tasksets if datasets else None
    rows = datasets.dataset_rows if datasets else None
    refs: dict[str, Any] = {}
    trainer_at, explorer_at = placed.options("trainer/0"), placed.options("explorer")
    if mode == "bench":
        actors["explorer"] = _actor(Explorer, f"{prefix}/explorer", cfg).remote(
            cfg, None, tasksets=tasksets
        )
        refs["explorer"] = actors["explorer"].bench.remote()
        return refs, None
    if mode == "train":
        actors["trainer"] = _actor(
            Trainer, f"{prefix}/trainer", cfg, rank0_gpus, **trainer_at
        ).remote(
            cfg,
            None,
            dataset_rows=rows,
            rank_placement=placed.trainer_ranks(),
            tasksets=tasksets,  # the eval tasksets of an SFT stage that evaluates
        )
        refs["trainer"] = actors["trainer"].run.remote(None, resume)
        return refs, resume or 0
    if mode == "explore":
        meta = read_explorer_meta(job_dir) if cfg.continue_from_checkpoint else None
        first = int(meta["latest_iteration"]) if meta else 0
        actors["explorer"] = _actor(
            Explorer, f"{prefix}/explorer", cfg, explorer_gpus, **explorer_at
        ).remote(cfg, None, tasksets=tasksets)
        refs["explorer"] = actors["explorer"].run.remote(first, 0, None)
        return refs, first
    if mode == "colocate":  # explorer and trainer in one actor on one GPU: runtime.in_process
        actors["colocate"] = _actor(
            InProcessRun, f"{prefix}/colocate", cfg, 1 if cfg.cluster.gpu_per_node else 0
        ).remote(cfg, tasksets, rows)
        refs["colocate"] = actors["colocate"].run.remote(resume)
        return refs, resume_point(cfg, resume)[0]
    if mode == "both":
        first, weights = resume_point(cfg, resume)
        sync = start_synchronizer(
            f"{prefix}/synchronizer",
            cfg.synchronizer.sync_method,
            cfg.synchronizer.sync_timeout,
            str(job_dir / "log" / "synchronizer.log"),
        )
        actors["synchronizer"] = sync
        # before the explorer can write this run's rows (its trainer would race it)
        drop_stale_experiences(cfg, resume)
        actors["trainer"] = _actor(
            Trainer, f"{prefix}/trainer", cfg, rank0_gpus, **trainer_at
        ).remote(
            cfg,
            sync,
            dataset_rows=rows,
            rank_placement=placed.trainer_ranks(),
            stale_experiences_dropped=True,
        )
        actors["explorer"] = _actor(
            Explorer, f"{prefix}/explorer", cfg, explorer_gpus, **explorer_at
        ).remote(cfg, sync, tasksets=tasksets)
        refs["trainer"] = actors["trainer"].run.remote(None, resume)
        refs["explorer"] = actors["explorer"].run.remote(first, resume or 0, weights)
        return refs, first
    raise ConfigError(
        "mode",
        f"{mode!r} is not supported by this engine; use both, explore, train, bench or colocate",
        value=mode,
    )


__all__ = ["StageResult", "run_stage"]
