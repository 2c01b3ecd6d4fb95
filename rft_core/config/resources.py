"""How a job's GPUs divide between its roles (config-derived, so the web forms, the validator
and the launcher agree without importing torch).

- ``gpu_split``: the explorer actor's and the trainer's GPUs in mode both;
- ``trainer_gpus``: the trainer's GPUs in any mode (all of the job's in mode train);
- ``trainer_world_size``: trainer ranks (``trainer.world_size``, else one per trainer GPU);
- ``check_cluster``: the rollout engines fit the job's GPUs, with one left for the trainer;
- ``check_world_size``: a world size the GPUs can hold (one GPU a rank);
- ``job_placement``: the Ray placement group bundles of the explorer and the trainer ranks on a
  GPU cluster (the rollout engines of ``engine_num > 1`` have their own: ``rollout/pool.py``).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rft_core.config.gpu_fit import engine_gpu_problem
from rft_core.config.problems import refuse
from rft_core.errors import ConfigError

if TYPE_CHECKING:
    from rft_core.config.schema import Config


def gpu_split(cfg: Config) -> tuple[float, float]:
    """(explorer actor GPUs, trainer GPUs) for mode both. With ``engine_num > 1`` the engines'
    placement group (``rft_core/rollout/pool.py``) holds the rollout GPUs, not the explorer."""
    total = cfg.cluster.gpu_per_node * cfg.cluster.node_num
    if total == 0:
        return 0, 0
    rm = cfg.explorer.rollout_model
    rollout = min(total - 1, rm.engine_num * rm.tensor_parallel_size) if total > 1 else 0.5
    trainer = total - rollout if total > 1 else 0.5
    return (0 if rm.engine_num > 1 else rollout), trainer


def trainer_gpus(cfg: Config) -> float:
    """GPUs the trainer's ranks hold together (0 on CPU): all of the job's in mode train, else
    what ``gpu_split`` leaves it (half of one GPU when it shares the only one)."""
    if not cfg.cluster.gpu_per_node:
        return 0
    if cfg.mode == "train":
        return cfg.cluster.gpu_per_node * cfg.cluster.node_num
    return gpu_split(cfg)[1]


def trainer_world_size(cfg: Config) -> int:
    """Trainer ranks: ``trainer.world_size`` when set, else one per whole trainer GPU (1 on
    CPU, in colocate, and when the trainer shares a GPU)."""
    if cfg.trainer.world_size is not None:
        return int(cfg.trainer.world_size)
    if cfg.mode == "colocate":
        return 1
    return max(1, int(trainer_gpus(cfg)))


def check_world_size(cfg: Config, path: str = "trainer.world_size") -> None:
    """A world size the job's resources can hold: one GPU per rank on a GPU cluster (the
    first problem reported; each one rules out the next)."""
    if cfg.mode in ("explore", "bench"):
        return  # no trainer in this job
    world = trainer_world_size(cfg)
    gpus = trainer_gpus(cfg)
    if world < 1:
        refuse(ConfigError(path, f"must be >= 1, got {world}", value=world))
    elif world > 1 and cfg.mode == "colocate":
        refuse(
            ConfigError(
                path,
                f"mode colocate trains in the explorer's process: world_size must be 1, got {world}",
                value=world,
            )
        )
    elif gpus and world > 1 and world > gpus:
        refuse(
            ConfigError(
                path,
                f"{world} trainer ranks need one GPU each, but the trainer has {gpus:g} "
                f"(cluster.node_num x cluster.gpu_per_node minus the rollout engines' GPUs)",
                value=world,
                allowed="at most the trainer's GPUs",
            )
        )


@dataclass(frozen=True)
class JobPlacement:
    """One Ray placement group for a job's GPU actors: ``bundles[i]`` is held by ``roles[i]``
    (``explorer``, ``trainer/0`` the trainer actor, ``trainer/R`` its rank R actors)."""

    bundles: tuple[dict[str, float], ...]
    roles: tuple[str, ...]
    strategy: str

    def index(self, role: str) -> int:
        return self.roles.index(role)

    def trainer_rank_indices(self) -> list[int]:
        """Bundle indices of trainer ranks 1..W-1, in rank order."""
        return [
            i for i, r in enumerate(self.roles) if r.startswith("trainer/") and r != "trainer/0"
        ]


def job_placement(cfg: Config) -> JobPlacement | None:
    """Where the explorer and the trainer ranks go on a GPU cluster of ``cluster.node_num``
    nodes with ``cluster.gpu_per_node`` GPUs each, or None where Ray's plain ``num_gpus``
    does (CPU runs; ``colocate``, one actor; a GPU the explorer and trainer share).

    Bundles: the explorer's rollout GPUs when it holds its engine (``engine_num == 1``), then
    one GPU per trainer rank. ``STRICT_PACK`` when they fit on one node (NVLink between the
    ranks and to the engine), else ``PACK``: Ray fills a node before the next, so the ranks
    of a multi-node trainer sit on as few nodes as the GPUs allow."""
    gpn, nodes = cfg.cluster.gpu_per_node, cfg.cluster.node_num
    if not gpn or cfg.mode not in ("both", "train", "explore"):
        return None
    roles: list[str] = []
    bundles: list[dict[str, float]] = []
    if cfg.mode in ("both", "explore"):
        explorer = gpu_split(cfg)[0]
        if explorer and explorer < 1:
            return None  # explorer and trainer share one GPU: fractions, not bundles
        if explorer:
            roles.append("explorer")
            bundles.append({"GPU": float(explorer)})
    if cfg.mode in ("both", "train"):
        world = trainer_world_size(cfg)
        gpus = trainer_gpus(cfg)
        if gpus < 1:
            return None
        per_rank = 1.0 if world > 1 else float(gpus)
        roles.extend(f"trainer/{r}" for r in range(world))
        bundles.extend({"GPU": per_rank} for _ in range(world))
    if not bundles:
        return None
    total = sum(b["GPU"] for b in bundles)
    strategy = "STRICT_PACK" if nodes == 1 or total <= gpn else "PACK"
    return JobPlacement(tuple(bundles), tuple(roles), strategy)


def auto_engine_type(gpus: int, tensor_parallel_size: int, vllm_installed: bool) -> str:
    """What ``engine_type: auto`` runs: the engine measured faster for the shape.

    One GPU per engine: ``hf``. On the H200 (Qwen2.5-1.5B shape, 128-token prompts, 8 samples,
    256 tokens; ``benchmarks/RESULTS.md``) the hf engine made 44.5k tokens/s against vLLM
    0.26's 21.8k for 256 rows and 67.9k against 17.5k for 2,048 rows. An engine over several
    GPUs (``tensor_parallel_size`` > 1): ``vllm``, the only engine that shards a model. Without
    GPUs, or without vLLM installed: ``hf``."""
    if gpus > 0 and tensor_parallel_size > 1 and vllm_installed:
        return "vllm"
    return "hf"


def check_cluster(cfg: Config) -> None:
    """The rollout engines fit the job's GPUs (``engine_type: auto`` resolved first,
    ``auto_engine_type``), leaving the trainer one in mode both. Its first problem is reported
    and ends it: each check reads the GPUs the one before found consistent."""
    c, rm = cfg.cluster, cfg.explorer.rollout_model
    total = c.node_num * c.gpu_per_node
    if rm.engine_type == "auto":
        vllm_installed = importlib.util.find_spec("vllm") is not None
        rm.engine_type = auto_engine_type(c.gpu_per_node, rm.tensor_parallel_size, vllm_installed)
    if rm.engine_type == "vllm" and total == 0:
        refuse(
            ConfigError(
                "explorer.rollout_model.engine_type",
                "vllm runs on GPUs but cluster.gpu_per_node is 0; set cluster.gpu_per_node or use engine_type hf",
                value="vllm",
                allowed=["hf", "auto"],
            )
        )
        return
    if total == 0 or cfg.mode in ("train",):
        return
    if problem := engine_gpu_problem(cfg):  # tensor_parallel_size against an engine's GPUs
        refuse(ConfigError(*problem))
        return
    rollout_gpus = rm.engine_num * rm.tensor_parallel_size
    shown = (
        f"explorer.rollout_model.engine_num {rm.engine_num} x tensor_parallel_size {rm.tensor_parallel_size} = "
        f"{rollout_gpus} GPUs, of cluster.node_num {c.node_num} x gpu_per_node {c.gpu_per_node} = {total}"
    )
    if cfg.mode == "both" and rollout_gpus >= total:
        refuse(
            ConfigError(
                "explorer.rollout_model.engine_num",
                f"{shown}: no GPU left for the trainer in mode both; use fewer engines, more GPUs, or mode colocate",
                value=rm.engine_num,
            )
        )
    elif rollout_gpus > total:
        refuse(
            ConfigError(
                "explorer.rollout_model.engine_num",
                f"{shown}: more GPUs than the job has",
                value=rm.engine_num,
            )
        )
