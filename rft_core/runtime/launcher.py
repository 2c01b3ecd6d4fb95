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

Everything a run needs that the machine lacks (the model directory, the datasets, the GPUs) is
checked before any actor starts, so a config written for a GPU cluster fails in a second on a
laptop with one message instead of hanging. The datasets that check reads are handed to the
stage's actors (``rft_core.data.run_datasets``): each is read once per run. The config is
validated once, when it is loaded; the stages it resolved are reused here.
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
from typing import TYPE_CHECKING, Any

from rft_core.actor_setup import run_name
from rft_core.checkpoint.layout import (
    RUN_CONFIG,
    STAGE_META,
    read_stage_meta,
    write_run_meta,
    write_stage_meta,
    write_text_atomic,
)
from rft_core.errors import ActorFailed, ConfigError, RFTError
from rft_core.plugins import export_plugin_dirs, load_plugins, plugin_dirs_from_env
from rft_core.runtime.ray_cluster import ray_address, start_ray

if TYPE_CHECKING:  # read by the preflight, imported there (pyarrow)
    from rft_core.config import Config
    from rft_core.data.run_datasets import RunDatasets

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


@dataclass
class RunResult:
    stages: list[StageResult] = field(default_factory=list)
    renamed_from: str | None = None  # job dir name when continue_from_checkpoint: false renamed it
    ray_address: str | None = None  # the Ray cluster the run joined (None: a local Ray of its own)
    wall_time_s: float = 0.0

    @property
    def last(self) -> StageResult:
        return self.stages[-1]


# -- checks before any actor starts -----------------------------------------------------------


def preflight(cfg: Config, check_model: bool = True) -> RunDatasets:
    """Raise one clear error when the model, the datasets or the GPUs of ``cfg`` are missing
    (``check_model=False`` for a later stage, whose model the stage before it writes). Returns
    the datasets it read, for the stage's actors."""
    from rft_core.data.run_datasets import read_run_datasets
    from rft_core.monitor.monitor import check_monitor

    check_monitor(cfg.monitor.monitor_type, run_name(cfg))  # what the actors' monitors need
    problems: list[tuple[str, str]] = []
    model_path = cfg.model.model_path
    if check_model and not (Path(model_path).expanduser() / "config.json").is_file():
        where = (
            "does not exist" if not Path(model_path).expanduser().exists() else "has no config.json"
        )
        problems.append(
            (
                "model.model_path",
                f"{model_path!r} {where}; download the model first (huggingface-cli download "
                "<repo> --local-dir DIR, then set model.model_path or TRINITY_MODEL_PATH to DIR), "
                "or run `trinity init-demo` for the tiny demo model",
            )
        )
    if cfg.mode != "train":
        for i, aux in enumerate(cfg.explorer.auxiliary_models):
            aux_path = Path(aux.model_path).expanduser()
            if not (aux_path / "config.json").is_file():
                problems.append(
                    (
                        f"explorer.auxiliary_models[{i}].model_path",
                        f"{aux.model_path!r} is not a model directory (no config.json); "
                        + (
                            "the demo judge is built on request: run `trinity init-demo --judge`"
                            if _is_demo_judge_path(aux_path)
                            else "download the judge model first (huggingface-cli download "
                            "<repo> --local-dir DIR) and set model_path to DIR"
                        ),
                    )
                )
            elif _is_demo_judge_path(aux_path) and not _demo_judge_is_current(aux_path):
                problems.append(
                    (
                        f"explorer.auxiliary_models[{i}].model_path",
                        f"{aux.model_path!r} holds a demo judge of an older recipe; run "
                        "`trinity init-demo --judge` to train the current one",
                    )
                )
    datasets, data_problems = read_run_datasets(cfg)
    problems.extend(("", message) for message in data_problems)  # messages name the YAML path
    problems.extend(_experience_buffer_problems(cfg))
    gpus_needed = cfg.cluster.gpu_per_node
    if gpus_needed > 0 and not ray_address(cfg):
        # a local Ray of this machine's GPUs; a joined cluster's are checked once joined
        problems.extend(_local_gpu_problems(cfg, check_model))
    rm = cfg.explorer.rollout_model
    if cfg.mode != "train" and rm.engine_type == "vllm" and not ray_address(cfg):
        from rft_core.rollout.vllm_version import installed_vllm_version, vllm_version_problem

        # on a Ray cluster the nodes' vLLM is checked by the engine's actor (the same line)
        problem = vllm_version_problem(installed_vllm_version())
        if problem:
            problems.append(("explorer.rollout_model.engine_type", problem))
    if cfg.mode == "both" and rm.engine_num > 1 and gpus_needed > 0:
        if cfg.synchronizer.sync_method == "nccl":
            # the broadcast reaches the explorer process, which holds no GPU beside its engines
            problems.append(
                (
                    "synchronizer.sync_method",
                    f"nccl weight sync into explorer.rollout_model.engine_num={rm.engine_num} GPU "
                    "engines is not supported yet; set synchronizer.sync_method: checkpoint "
                    "(every engine then loads each saved state dict), or engine_num: 1",
                )
            )
    if not problems:
        return datasets
    if len(problems) == 1:
        raise ConfigError(*problems[0])
    raise ConfigError("", "; ".join(f"{p}: {m}" if p else m for p, m in problems))


def _is_demo_judge_path(path: Path) -> bool:
    """Whether ``path`` is where ``trinity init-demo --judge`` puts the demo judge: ``judge`` in a
    demo directory, or in one not built yet."""
    from rft_core.demo import MARKER_NAME

    parent = path.parent
    return path.name == "judge" and (not parent.exists() or (parent / MARKER_NAME).is_file())


def _demo_judge_is_current(path: Path) -> bool:
    from rft_core.demo_judge import judge_is_current

    return judge_is_current(path)


def dry_run_checks(cfg: Config) -> list[str]:
    """What ``trinity run --dry-run`` checks beyond the config: every data check the run makes
    at its start (dataset columns such as ``format.response_key``, SFT/DPO/expert files, the
    experience buffer's queue path), per stage, raising one ConfigError naming them all.
    Returns notes on what it cannot check here and the run checks at its start: datasets not
    on this machine (they may be where the run starts), and (not attempted) the model and
    judge directories and the GPUs."""
    from rft_core.config import resolve_stages
    from rft_core.data.run_datasets import read_run_datasets

    notes: list[str] = []
    problems: list[tuple[str, str]] = []
    for stage in resolve_stages(cfg):
        _, data_problems = read_run_datasets(stage, missing=notes)
        problems.extend(("", message) for message in data_problems)
        problems.extend(_experience_buffer_problems(stage))
    if len(problems) == 1:
        raise ConfigError(*problems[0])
    if problems:
        raise ConfigError("", "; ".join(f"{p}: {m}" if p else m for p, m in problems))
    return notes


def _local_gpu_problems(cfg: Config, check_model: bool) -> list[tuple[str, str]]:
    """This machine's GPUs against the job's (count, and the vLLM engine's weights against one
    GPU's memory x ``gpu_memory_utilization``): ``rft_core.config.gpu_fit``."""
    import json

    import torch

    from rft_core.config.gpu_fit import (
        cluster_gpu_problem,
        colocate_memory_problem,
        memory_fit_problem,
    )

    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    where = "this machine (no RAY_ADDRESS / cluster.ray_address given)"
    problems = [p for p in [cluster_gpu_problem(cfg, have, where)] if p]
    config_json = Path(cfg.model.model_path).expanduser() / "config.json"
    if not problems and have and check_model and config_json.is_file():
        memory = torch.cuda.get_device_properties(0).total_memory
        hf_config = json.loads(config_json.read_text())
        fit = memory_fit_problem(cfg, hf_config, memory) or colocate_memory_problem(
            cfg, hf_config, memory
        )
        problems.extend([fit] if fit else [])
    return problems


def check_joined_cluster(cfg: Config, cluster_gpus: float, address: str | None) -> None:
    """After joining a Ray cluster (``RAY_ADDRESS``), before any actor: the job's GPUs against
    the cluster's ``GPU`` resource (``ray.cluster_resources()``, passed in)."""
    from rft_core.config.gpu_fit import cluster_gpu_problem, raise_first

    if address and cfg.cluster.gpu_per_node > 0:
        raise_first(cluster_gpu_problem(cfg, cluster_gpus, f"the Ray cluster at {address}"))


def _experience_buffer_problems(cfg: Config) -> list[tuple[str, str]]:
    eb = cfg.buffer.trainer_input.experience_buffer
    if cfg.mode == "explore" and eb is not None and eb.storage_type == "queue" and not eb.path:
        from rft_core.config.buffer_checks import QUEUE_BETWEEN_JOBS_NEEDS_PATH

        return [("buffer.trainer_input.experience_buffer.path", QUEUE_BETWEEN_JOBS_NEEDS_PATH)]
    return []


# -- Ray actors -------------------------------------------------------------------------------


def _actor(cls: type, name: str, cfg: Config, num_gpus: float = 0, **placed: Any) -> Any:
    import ray

    return ray.remote(cls).options(
        name=name, num_cpus=0, num_gpus=num_gpus, max_concurrency=4, **placed
    )


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


def _wait_all(refs: dict[str, Any], actors: dict[str, Any], progress: Any) -> dict[str, Any]:
    """Wait for every role's ``run`` ref; the first failure cancels the rest and raises
    ActorFailed naming the role and its error."""
    import ray

    pending = dict(refs)
    results: dict[str, Any] = {}
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
        shown = next(r for r in ("explorer", "colocate", "trainer") if r in actors)
        if progress is not None and shown in pending:
            try:
                info = ray.get(actors[shown].progress.remote(), timeout=5)
                if info.get("total") and progress.total != info["total"]:
                    progress.total = info["total"]  # known once the taskset is read
                progress.update(info["step"] - progress.n)
            except ray.exceptions.GetTimeoutError:
                pass
    return results


_RAY_NEVER_RAN = "The actor never ran"


def _one_line(err: BaseException) -> str:
    """The error's last line; for an actor that never started, Ray's reason before its note."""
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    if len(lines) > 1 and lines[-1].startswith(_RAY_NEVER_RAN):
        return f"{type(err).__name__}: {lines[-2]} ({lines[-1]})"
    return f"{type(err).__name__}: {lines[-1] if lines else ''}"


# -- stages -----------------------------------------------------------------------------------


def _resume_step(cfg: Config) -> int | None:
    from rft_core.checkpoint.layout import latest_checkpoint_step

    if not cfg.continue_from_checkpoint:
        return None
    return latest_checkpoint_step(Path(cfg.job_dir))


def _progress_bar(cfg: Config, start: int, role: str = "explorer") -> Any:
    """A tqdm bar of the role's steps, in a terminal only (logs and Ray jobs stay clean)."""
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

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
    import ray

    from rft_core.buffer.queue import actor_name

    eb = cfg.buffer.trainer_input.experience_buffer
    if eb is None or eb.storage_type != "queue":
        return
    try:
        ray.kill(ray.get_actor(actor_name(eb.name, Path(cfg.job_dir))))
    except ValueError:
        pass  # never started


def _run_stage(cfg: Config, datasets: RunDatasets | None) -> StageResult:
    import ray

    from rft_core.actors.placement import JobPlacementGroup, job_placement_name
    from rft_core.checkpoint.layout import read_explorer_meta
    from rft_core.config.resources import gpu_split, job_placement, trainer_gpus, trainer_world_size
    from rft_core.explorer.explorer import Explorer
    from rft_core.runtime.in_process import InProcessRun, resume_point
    from rft_core.sync.synchronizer import start_synchronizer
    from rft_core.trainer.trainer import Trainer

    start = time.perf_counter()
    job_dir = Path(cfg.job_dir)
    for sub in ("buffer", "log", "monitor"):
        (job_dir / sub).mkdir(parents=True, exist_ok=True)
    result = StageResult(cfg.stage_name, str(job_dir), cfg.mode)
    resume = _resume_step(cfg)
    if resume is not None:
        log.warning("resuming %s from global_step_%d", job_dir, resume)
    prefix = f"{cfg.project}/{cfg.name}/{cfg.stage_name or ''}"
    mode = cfg.mode
    explorer_gpus = gpu_split(cfg)[0]
    # several trainer ranks: this actor is rank 0 on one GPU, each other rank has one of its own
    rank0_gpus = (
        1 if trainer_world_size(cfg) > 1 and cfg.cluster.gpu_per_node else trainer_gpus(cfg)
    )
    tasksets = datasets.tasksets if datasets else None
    rows = datasets.dataset_rows if datasets else None
    actors: dict[str, Any] = {}
    refs: dict[str, Any] = {}
    bar = None
    # the explorer's and the trainer ranks' GPUs (rft_core/config/resources.py job_placement)
    placed = JobPlacementGroup(job_placement(cfg), job_placement_name(str(job_dir)))
    trainer_at, explorer_at = placed.options("trainer/0"), placed.options("explorer")
    if mode == "bench":
        actors["explorer"] = _actor(Explorer, f"{prefix}/explorer", cfg).remote(
            cfg, None, tasksets=tasksets
        )
        refs["explorer"] = actors["explorer"].bench.remote()
    elif mode == "train":
        actors["trainer"] = _actor(
            Trainer, f"{prefix}/trainer", cfg, rank0_gpus, **trainer_at
        ).remote(cfg, None, dataset_rows=rows, rank_placement=placed.trainer_ranks())
        refs["trainer"] = actors["trainer"].run.remote(None, resume)
        bar = _progress_bar(cfg, resume or 0, "trainer")
    elif mode == "explore":
        meta = read_explorer_meta(job_dir) if cfg.continue_from_checkpoint else None
        first = int(meta["latest_iteration"]) if meta else 0
        actors["explorer"] = _actor(
            Explorer, f"{prefix}/explorer", cfg, explorer_gpus, **explorer_at
        ).remote(cfg, None, tasksets=tasksets)
        refs["explorer"] = actors["explorer"].run.remote(first, 0, None)
        bar = _progress_bar(cfg, first)
    elif (
        mode == "colocate"
    ):  # explorer and trainer in one actor on one GPU: rft_core.runtime.in_process
        actors["colocate"] = _actor(
            InProcessRun, f"{prefix}/colocate", cfg, 1 if cfg.cluster.gpu_per_node else 0
        ).remote(cfg, tasksets, rows)
        refs["colocate"] = actors["colocate"].run.remote(resume)
        bar = _progress_bar(cfg, resume_point(cfg, resume)[0])
    elif mode == "both":
        first, weights = resume_point(cfg, resume)
        sync = start_synchronizer(
            f"{prefix}/synchronizer",
            cfg.synchronizer.sync_method,
            cfg.synchronizer.sync_timeout,
            str(job_dir / "log" / "synchronizer.log"),
        )
        actors["synchronizer"] = sync
        actors["trainer"] = _actor(
            Trainer, f"{prefix}/trainer", cfg, rank0_gpus, **trainer_at
        ).remote(cfg, sync, dataset_rows=rows, rank_placement=placed.trainer_ranks())
        actors["explorer"] = _actor(
            Explorer, f"{prefix}/explorer", cfg, explorer_gpus, **explorer_at
        ).remote(cfg, sync, tasksets=tasksets)
        refs["trainer"] = actors["trainer"].run.remote(None, resume)
        refs["explorer"] = actors["explorer"].run.remote(first, resume or 0, weights)
        bar = _progress_bar(cfg, first)
    else:
        raise ConfigError(
            "mode",
            f"{mode!r} is not supported by this engine; use both, explore, train, bench or colocate",
            value=mode,
        )
    try:
        out = _wait_all(refs, actors, bar)
    finally:
        if bar is not None:
            bar.close()
        for actor in actors.values():
            ray.kill(actor)
        placed.remove()
        if cfg.explorer.rollout_model.engine_num > 1:
            from rft_core.rollout.pool import engine_pool_name, remove_engine_pool

            remove_engine_pool(engine_pool_name(job_dir))  # a killed explorer leaves its own
    out.update(out.pop("colocate", {}))  # the in-process run's {"explorer", "trainer"}
    result.trainer, result.explorer = out.get("trainer"), out.get("explorer")
    if mode == "bench":
        result.bench, result.explorer = result.explorer, None
    result.wall_time_s = time.perf_counter() - start
    return result


def _latest_hf_dir(job_dir: Path) -> Path | None:
    from rft_core.checkpoint.layout import hf_dir, latest_checkpoint_step, step_dir

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
    from rft_core.config import resolve_stages
    from rft_core.config.registered import check_registered_names
    from rft_core.registries import registered_names_table

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
                    import ray

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
            import ray

            ray.shutdown()
    result.wall_time_s = time.perf_counter() - started
    return result


def cli_run(args: argparse.Namespace) -> int:
    """``trinity run --config X [--plugin-dir DIR ...] [--dry-run] [key=value ...]``."""
    from rft_core.config import config_to_yaml, load_config
    from rft_core.config.registered import check_registered_names
    from rft_core.registries import registered_names_table

    own_dirs = list(getattr(args, "plugin_dir", None) or ())
    load_plugins([*own_dirs, *plugin_dirs_from_env()])
    export_plugin_dirs(own_dirs)  # the run's actors load them too
    cfg = load_config(args.config, list(getattr(args, "overrides", None) or ()))
    if getattr(args, "dry_run", False):
        check_registered_names(cfg, registered_names_table())
        for note in dry_run_checks(cfg):  # the data checks of the run's start
            print(
                f"dry run: not checked here, checked when the run starts: {note}",
                file=sys.stderr,
            )
        print(config_to_yaml(cfg), end="")
        return 0
    from rft_core.monitor import dashboard

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


__all__ = [
    "RunResult",
    "StageResult",
    "cli_run",
    "dry_run_checks",
    "preflight",
    "run_experiment",
    "run_stage",
]
