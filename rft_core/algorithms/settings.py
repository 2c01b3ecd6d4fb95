"""What ``algorithm.*`` means at run time: the settings resolved against the ``algorithm_type``
preset (``rft_core.config.presets``), read by the trainer and the explorer alike, and the
filter that hands a registered function only the ``*_fn_args`` it takes."""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass, field
from typing import Any

from rft_core.algorithms.advantages import get_advantage_fn
from rft_core.config.presets import get_preset, ignored_kl_penalty
from rft_core.config.schema import AlgorithmConfig

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
    # a group fn computed by the trainer, over its batch (grpo_verl, as Trinity's)
    compute_advantage_in_trainer: bool = False

    @classmethod
    def from_config(cls, cfg: AlgorithmConfig) -> AlgorithmSettings:
        """The settings of ``cfg`` (an ``AlgorithmConfig``), warning in this process's log
        about a ``kl_penalty_fn`` the algorithm ignores."""
        warning = ignored_kl_penalty(
            getattr(cfg, "algorithm_type", "grpo"), getattr(cfg, "kl_penalty_fn", None)
        )
        if warning:
            log.warning(warning)  # in the trainer's log (job_dir/log/trainer.log)
        return cls.resolve(cfg)

    @classmethod
    def resolve(cls, cfg: AlgorithmConfig) -> AlgorithmSettings:
        """The settings of ``cfg``, quietly (``from_config`` says what the run ignores)."""
        preset = get_preset(getattr(cfg, "algorithm_type", "grpo"))

        def pick(name: str, default: Any) -> Any:
            value = getattr(cfg, name, None)
            return default if value is None else value

        kl_loss_args = dict(pick("kl_loss_fn_args", {}))
        kl_penalty_args = dict(pick("kl_penalty_fn_args", {}))
        entropy_args = dict(pick("entropy_loss_fn_args", {}))
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
            compute_advantage_in_trainer=preset.compute_advantage_in_trainer,
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

    @property
    def advantages_in_explorer(self) -> bool:
        """Where the advantages are computed: a group fn in the explorer, from the raw rewards
        of each group, and the trainer uses them as they arrive; a token-level fn, or a group fn
        over KL-penalized rewards (those need the reference log-probs), in the trainer."""
        if not self.advantage_fn or self.compute_advantage_in_trainer:
            return False
        return get_advantage_fn(self.advantage_fn).level == "group" and not self.uses_kl_penalty


def accepted_args(fn: Any, args: dict[str, Any], path: str) -> dict[str, Any]:
    """The ``*_fn_args`` that ``fn`` takes; the others are warned about (``path``) and dropped."""
    names = set(inspect.signature(fn).parameters)
    unknown = sorted(set(args) - names)
    if unknown:
        log.warning("%s: ignoring %s (not used by %s)", path, unknown, fn.__name__)
    return {k: v for k, v in args.items() if k in names}
