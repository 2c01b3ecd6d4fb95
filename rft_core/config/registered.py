"""Names and arguments a config hands to the registries (workflows, rewards, advantage fns,
policy losses), checked before a run starts.

Kept out of ``validate`` because the registries import torch (seconds, and memory the web
process should not pay for a form); ``run_experiment`` and ``trinity run --dry-run`` call it.
"""

from __future__ import annotations

import difflib
import inspect
import logging
from typing import Any

from rft_core.config.schema import Config
from rft_core.errors import ConfigError

log = logging.getLogger(__name__)

# arguments the trainer passes itself, never from the config
_INTERNAL_ARGS = {"horizon", "loss_agg_mode", "sum_across_ranks"}
# Trinity's KL fn arguments: kl_coef is used; the adaptive controller is not built here
_KL_ARGS = ["kl_coef"]
_KL_ARGS_IGNORED = ["adaptive", "target_kl", "horizon"]


def check_registered_names(cfg: Config) -> None:
    """Every workflow, reward function, advantage function and policy loss the config names is
    registered, and their ``*_fn_args`` hold no misspelt argument."""
    from rft_core import rewards, workflows
    from rft_core.algorithms.advantages import ADVANTAGE_FNS
    from rft_core.algorithms.policy_losses import POLICY_LOSS_FNS
    from rft_core.config.stages import resolve_stages

    for i, stage in enumerate(resolve_stages(cfg)):
        prefix = f"stages[{i}]." if cfg.stages and cfg.stages[i].algorithm is not None else ""
        if stage.algorithm.advantage_fn:
            ADVANTAGE_FNS.get(stage.algorithm.advantage_fn, path=f"{prefix}algorithm.advantage_fn")
        loss = stage.algorithm.policy_loss_fn
        if loss and loss not in POLICY_LOSS_FNS:
            raise ConfigError(
                f"{prefix}algorithm.policy_loss_fn",
                f"unknown policy loss {loss!r}; choose one of {', '.join(POLICY_LOSS_FNS)}",
                value=loss,
                allowed=list(POLICY_LOSS_FNS),
            )
        _check_fn_args(stage.algorithm, prefix)
        ei = stage.buffer.explorer_input
        for ts in [*ei.all_tasksets, *ei.eval_tasksets]:
            where = getattr(ts, "_yaml_path", "buffer.explorer_input.taskset")  # stage's own
            workflows.get(ts.default_workflow_type, path=f"{where}.default_workflow_type")
            if ts.default_reward_fn_type:
                rewards.get(ts.default_reward_fn_type, path=f"{where}.default_reward_fn_type")


def _settable(fn: Any) -> list[str]:
    """The keyword arguments of ``fn`` a config may set (those with defaults)."""
    return [
        name
        for name, p in inspect.signature(fn).parameters.items()
        if p.default is not p.empty and name not in _INTERNAL_ARGS
    ]


def _check_fn_args(algorithm: Any, prefix: str) -> None:
    """A key of ``*_fn_args`` close to one the function takes is a typo: an error naming it
    (``kl_coeff`` -> ``kl_coef``). Other unknown keys are warned about and ignored (Trinity
    configs carry keys for features this engine does not have)."""
    from rft_core.algorithms.advantages import get_advantage_fn
    from rft_core.algorithms.policy_losses import dpo_loss, ppo_clip_loss, sft_loss
    from rft_core.trainer.settings import AlgorithmSettings

    algo = AlgorithmSettings.from_config(algorithm)
    loss_fn = {"ppo": ppo_clip_loss, "sft": sft_loss, "dpo": dpo_loss}[algo.policy_loss_fn]
    known = {
        "policy_loss_fn_args": (_settable(loss_fn), []),
        "kl_loss_fn_args": (_KL_ARGS, _KL_ARGS_IGNORED),
        "kl_penalty_fn_args": (_KL_ARGS, _KL_ARGS_IGNORED),
        "entropy_loss_fn_args": (["entropy_coef"], []),
    }
    if algo.advantage_fn:
        known["advantage_fn_args"] = (_settable(get_advantage_fn(algo.advantage_fn).fn), [])
    for section, (accepted, ignored) in known.items():
        for key in getattr(algorithm, section, None) or {}:
            if key in accepted:
                continue
            path = f"{prefix}algorithm.{section}.{key}"
            close = difflib.get_close_matches(key, accepted, n=1, cutoff=0.75)
            if close and key not in ignored:
                raise ConfigError(
                    path,
                    f"unknown argument {key!r}; did you mean {close[0]!r}? "
                    f"accepted: {', '.join(accepted) or 'none'}",
                    allowed=accepted,
                )
            log.warning(
                "%s: not used by this engine, ignored (used: %s)", path, ", ".join(accepted)
            )
