"""What ``algorithm.*`` means for the trainer: the settings resolved against the
``algorithm_type`` preset, the optimizer, and the learning-rate schedule."""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from rft_core.algorithms.presets import get_preset, ignored_kl_penalty
from rft_core.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass
class AlgorithmSettings:
    """``algorithm.*`` resolved against the ``algorithm_type`` preset."""

    algorithm_type: str
    policy_loss_fn: str
    policy_loss_args: dict[str, Any]
    advantage_fn: str | None
    advantage_args: dict[str, Any]
    kl_loss_fn: str
    kl_coef: float
    kl_penalty_fn: str
    kl_penalty_coef: float
    entropy_coef: float
    loss_agg_mode: str
    use_critic: bool
    optimizer: dict[str, Any] = field(default_factory=dict)
    applies_kl_penalty: bool = True  # False: the preset ignores kl_penalty_fn (grpo, as Trinity)

    @classmethod
    def from_config(cls, cfg: Any) -> AlgorithmSettings:
        preset = get_preset(getattr(cfg, "algorithm_type", "grpo"))

        def pick(name: str, default: Any) -> Any:
            value = getattr(cfg, name, None)
            return default if value is None else value

        kl_loss_args = dict(pick("kl_loss_fn_args", {}))
        kl_penalty_args = dict(pick("kl_penalty_fn_args", {}))
        entropy_args = dict(pick("entropy_loss_fn_args", {}))
        warning = ignored_kl_penalty(preset.algorithm_type, pick("kl_penalty_fn", None))
        if warning:
            log.warning(warning)  # in the trainer's log (job_dir/log/trainer.log)
        opt = getattr(cfg, "optimizer", None)
        optimizer = {
            key: getattr(opt, key, default)
            for key, default in (
                ("lr", 1e-6),
                ("lr_warmup_steps", -1),
                ("lr_warmup_steps_ratio", 0.0),
                ("lr_scheduler_type", "constant"),
                ("min_lr_ratio", 0.0),
                ("optimizer_type", "adamw"),
                ("betas", [0.9, 0.999]),
                ("weight_decay", 0.01),
            )
        }
        return cls(
            algorithm_type=preset.algorithm_type,
            policy_loss_fn=str(pick("policy_loss_fn", preset.policy_loss_fn)).lower(),
            policy_loss_args={**preset.policy_loss_fn_args, **pick("policy_loss_fn_args", {})},
            advantage_fn=pick("advantage_fn", preset.advantage_fn),
            advantage_args={**preset.advantage_fn_args, **pick("advantage_fn_args", {})},
            kl_loss_fn=str(pick("kl_loss_fn", preset.kl_loss_fn)).lower(),
            kl_coef=float(kl_loss_args.get("kl_coef", preset.kl_coef)),
            kl_penalty_fn=str(pick("kl_penalty_fn", preset.kl_penalty_fn)).lower(),
            kl_penalty_coef=float(kl_penalty_args.get("kl_coef", preset.kl_penalty_coef)),
            entropy_coef=float(entropy_args.get("entropy_coef", preset.entropy_coef)),
            loss_agg_mode=pick("loss_agg_mode", preset.loss_agg_mode),
            use_critic=preset.use_critic,
            optimizer=optimizer,
            applies_kl_penalty=preset.applies_kl_penalty,
        )

    @property
    def uses_kl_loss(self) -> bool:
        return self.kl_loss_fn != "none" and self.kl_coef > 0

    @property
    def uses_kl_penalty(self) -> bool:
        return self.applies_kl_penalty and self.kl_penalty_fn != "none" and self.kl_penalty_coef > 0

    @property
    def needs_reference(self) -> bool:
        return self.uses_kl_loss or self.uses_kl_penalty or self.policy_loss_fn == "dpo"


def lr_factor(step: int, *, warmup: int, total: int | None, kind: str, min_ratio: float) -> float:
    """Multiplier of the base lr for the ``step``-th optimizer step (0-based). Warmup is linear
    and starts at lr/warmup (verl starts at 0, which wastes the first step); then constant, or
    cosine/linear decay to ``min_ratio`` at ``total`` steps."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if kind == "constant" or not total or total <= warmup:
        return 1.0
    progress = min(1.0, max(0.0, (step - warmup) / (total - warmup)))
    if kind == "cosine":
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
    if kind == "linear":
        return min_ratio + (1.0 - min_ratio) * (1.0 - progress)
    raise ConfigError(
        "algorithm.optimizer.lr_scheduler_type",
        f"unknown schedule {kind!r}; choose constant, cosine or linear",
        value=kind,
        allowed=["constant", "cosine", "linear"],
    )


def accepted_args(fn: Any, args: dict[str, Any], path: str) -> dict[str, Any]:
    names = set(inspect.signature(fn).parameters)
    unknown = sorted(set(args) - names)
    if unknown:
        log.warning("%s: ignoring %s (not used by %s)", path, unknown, fn.__name__)
    return {k: v for k, v in args.items() if k in names}


def build_optimizer(
    parameters: Iterable[torch.nn.Parameter], optimizer: dict[str, Any], device: torch.device
) -> torch.optim.Optimizer:
    """AdamW (or adam/sgd) with the config's lr, betas and weight decay; fused on CUDA."""
    params = [p for p in parameters if p.requires_grad]
    kind = str(optimizer["optimizer_type"]).lower()
    lr, weight_decay = float(optimizer["lr"]), float(optimizer["weight_decay"])
    if kind in ("adamw", "adam"):
        cls = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
        fused = {"fused": True} if device.type == "cuda" else {}
        betas = tuple(optimizer["betas"])
        return cls(params, lr=lr, betas=betas, weight_decay=weight_decay, **fused)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
    raise ConfigError(
        "algorithm.optimizer.optimizer_type",
        f"unknown optimizer {kind!r}; choose adamw, adam or sgd",
        value=kind,
        allowed=["adamw", "adam", "sgd"],
    )


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: dict[str, Any], total_steps: int | None
) -> torch.optim.lr_scheduler.LambdaLR:
    """Warmup (``lr_warmup_steps``, or ``lr_warmup_steps_ratio`` × total steps) then the
    ``lr_scheduler_type`` schedule; see :func:`lr_factor`."""
    warmup = int(cfg["lr_warmup_steps"])
    if warmup < 0:
        warmup = int(float(cfg["lr_warmup_steps_ratio"]) * (total_steps or 0))
    kind, min_ratio = cfg["lr_scheduler_type"], float(cfg["min_lr_ratio"])
    if kind != "constant" and not total_steps:
        log.warning("lr_scheduler_type %s needs total steps; using constant lr", kind)
    lr_factor(0, warmup=warmup, total=total_steps, kind=kind, min_ratio=min_ratio)  # validates
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: lr_factor(s, warmup=warmup, total=total_steps, kind=kind, min_ratio=min_ratio),
    )
