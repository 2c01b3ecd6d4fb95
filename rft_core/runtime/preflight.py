"""The checks before any actor starts: everything a run needs that the machine lacks (the model
directory, the auxiliary models, the datasets, the GPUs, the vLLM version) fails in a second with
one message naming every problem, instead of a config written for a GPU cluster hanging on a
laptop. The datasets the check reads are handed to the stage's actors
(``rft_core.data.run_datasets``): each is read once per run.

    preflight(cfg) -> RunDatasets          # ``trinity run``, per stage, before Ray starts
    dry_run_checks(cfg) -> notes           # ``trinity run --dry-run``: the data checks only
    check_joined_cluster(cfg, gpus, addr)  # once a Ray cluster is joined

Auxiliary model directories that something else builds on request have a check registered with
:func:`register_aux_model_check` (the demo judge's, by ``trinity run`` in ``rft_core.cli``), so
the run machinery knows no demo module.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch

from rft_core.actor_setup import run_name
from rft_core.config import Config, resolve_stages
from rft_core.config.buffer_checks import QUEUE_BETWEEN_JOBS_NEEDS_PATH
from rft_core.config.gpu_fit import (
    cluster_gpu_problem,
    colocate_memory_problem,
    memory_fit_problem,
    raise_first,
)
from rft_core.data.run_datasets import RunDatasets, read_run_datasets
from rft_core.errors import ConfigError
from rft_core.monitor.monitor import check_monitor
from rft_core.rollout.vllm_version import installed_vllm_version, vllm_version_problem
from rft_core.runtime.ray_cluster import ray_address

# An auxiliary model's directory -> the problem with it (said after the quoted path), or None
# when the check has nothing to say about it; the first problem found is reported.
AuxModelCheck = Callable[[Path], str | None]
AUX_MODEL_CHECKS: list[AuxModelCheck] = []


def register_aux_model_check(check: AuxModelCheck) -> None:
    """Have the preflight ask ``check`` about every auxiliary model directory (once, however often
    it is registered)."""
    if check not in AUX_MODEL_CHECKS:
        AUX_MODEL_CHECKS.append(check)


def preflight(cfg: Config, check_model: bool = True) -> RunDatasets:
    """Raise one clear error when the model, the datasets or the GPUs of ``cfg`` are missing
    (``check_model=False`` for a later stage, whose model the stage before it writes). Returns
    the datasets it read, for the stage's actors."""
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
            problem = auxiliary_model_problem(Path(aux.model_path).expanduser())
            if problem:
                path = f"explorer.auxiliary_models[{i}].model_path"
                problems.append((path, f"{aux.model_path!r} {problem}"))
    datasets, data_problems = read_run_datasets(cfg)
    problems.extend(("", message) for message in data_problems)  # messages name the YAML path
    problems.extend(_experience_buffer_problems(cfg))
    gpus_needed = cfg.cluster.gpu_per_node
    if gpus_needed > 0 and not ray_address(cfg):
        # a local Ray of this machine's GPUs; a joined cluster's are checked once joined
        problems.extend(_local_gpu_problems(cfg, check_model))
    rm = cfg.explorer.rollout_model
    if cfg.mode != "train" and rm.engine_type == "vllm" and not ray_address(cfg):
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
    if problems:
        raise _one_error(problems)
    return datasets


def auxiliary_model_problem(path: Path) -> str | None:
    """What is wrong with the auxiliary model directory ``path``: a registered check's word
    first (:data:`AUX_MODEL_CHECKS`), else whether it is a model directory at all."""
    for check in AUX_MODEL_CHECKS:
        problem = check(path)
        if problem:
            return problem
    if (path / "config.json").is_file():
        return None
    return (
        "is not a model directory (no config.json); download the judge model first "
        "(huggingface-cli download <repo> --local-dir DIR) and set model_path to DIR"
    )


def dry_run_checks(cfg: Config) -> list[str]:
    """What ``trinity run --dry-run`` checks beyond the config: every data check the run makes
    at its start (dataset columns such as ``format.response_key``, SFT/DPO/expert files, the
    experience buffer's queue path), per stage, raising one ConfigError naming them all.
    Returns notes on what it cannot check here and the run checks at its start: datasets not
    on this machine (they may be where the run starts), and (not attempted) the model and
    judge directories and the GPUs."""
    notes: list[str] = []
    problems: list[tuple[str, str]] = []
    for stage in resolve_stages(cfg):
        _, data_problems = read_run_datasets(stage, missing=notes)
        problems.extend(("", message) for message in data_problems)
        problems.extend(_experience_buffer_problems(stage))
    if problems:
        raise _one_error(problems)
    return notes


def _one_error(problems: list[tuple[str, str]]) -> ConfigError:
    """One ConfigError: the problem itself when there is one, else all of them on one line."""
    if len(problems) == 1:
        return ConfigError(*problems[0])
    return ConfigError("", "; ".join(f"{p}: {m}" if p else m for p, m in problems))


def _local_gpu_problems(cfg: Config, check_model: bool) -> list[tuple[str, str]]:
    """This machine's GPUs against the job's (count, and the vLLM engine's weights against one
    GPU's memory x ``gpu_memory_utilization``): ``rft_core.config.gpu_fit``."""
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
    if address and cfg.cluster.gpu_per_node > 0:
        raise_first(cluster_gpu_problem(cfg, cluster_gpus, f"the Ray cluster at {address}"))


def _experience_buffer_problems(cfg: Config) -> list[tuple[str, str]]:
    eb = cfg.buffer.trainer_input.experience_buffer
    if cfg.mode == "explore" and eb is not None and eb.storage_type == "queue" and not eb.path:
        return [("buffer.trainer_input.experience_buffer.path", QUEUE_BETWEEN_JOBS_NEEDS_PATH)]
    return []


__all__ = [
    "AUX_MODEL_CHECKS",
    "register_aux_model_check",
    "auxiliary_model_problem",
    "check_joined_cluster",
    "dry_run_checks",
    "preflight",
]
