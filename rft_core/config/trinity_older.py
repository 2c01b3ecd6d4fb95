"""Keys of older Trinity-RFT versions (0.1 - 0.2) that its public example configs still carry,
read the way Trinity read them (``rft_core.config.trinity_compat.apply_deprecated`` calls
:func:`apply_older_spellings`), each with one warning naming the current key:

- ``experience_buffer.use_priority_queue`` / ``reuse_cooldown_time`` / ``replay_buffer_kwargs``
  (Trinity before its storage-config split, #338): ``replay_buffer.enable`` /
  ``.reuse_cooldown_time`` / ``.priority_fn`` + ``.priority_fn_args``;
- ``algorithm.add_strategy`` (+ ``add_strategy_args``), removed in Trinity #211: the explorer-side
  advantage. ``step_wise_grpo`` (one experience per turn, the episode's reward broadcast to its
  turns) became ``algorithm_type: multi_step_grpo`` there, so it is read as that algorithm (the
  algorithm registry then accepts or refuses it by name); ``grpo`` / ``opmd`` as that
  ``advantage_fn``; the others (``reward_variance``, ``correct_bias``, ``duplicate_informative``)
  are refused by name;
- ``trainer.actor_grad_clip`` (renamed in Trinity #329): ``trainer.grad_clip``;
- ``buffer.explorer_input.reply_prefix`` (beside ``system_prompt``): the validator copies it
  into each taskset's ``format.reply_prefix`` when the format gives none, as Trinity did;
- ``algorithm.policy_loss_fn_args.loss_agg_mode`` (Trinity's frozen-lake example): Trinity 0.6
  overwrites it with ``algorithm.loss_agg_mode``; so does this (with a warning);
- a workflow named by the Python class path of a Trinity example that RFT Studio has as a
  registered workflow (``WORKFLOW_CLASS_PATHS``: Trinity imports the class from its repository's
  ``examples/``): read as that workflow's name. Other class paths are refused by
  ``rft_core.config.registered`` with what to do (a plugin directory);
- ``data_processor.data_processor_url`` is not read: it pointed Trinity's launcher at an
  outside data-processor server; the loader refuses it with that reason
  (``rft_core.config.load.MOVED_KEYS``), before the older pipeline keys beside it.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from rft_core.config.schema import AlgorithmConfig
from rft_core.config.trinity_sections import ReplayBufferConfig
from rft_core.errors import ConfigError

if TYPE_CHECKING:
    from rft_core.config.schema import Config

log = logging.getLogger("rft_core.config.trinity_compat")

# add_strategy -> (algorithm_type it became, or None: an advantage_fn of the same name)
ADD_STRATEGIES = {"step_wise_grpo": "multi_step_grpo", "grpo": None, "opmd": None}
REFUSED_ADD_STRATEGIES = {
    "reward_variance": "drops groups whose reward variance is at most variance_threshold; "
    "algorithm.advantage_fn_args.std_threshold of grpo does this",
    "correct_bias": "GRPO with a bias correction",
    "duplicate_informative": "duplicates informative groups",
}


# Trinity example workflow classes (``examples.<dir>.<module>.<Class>``) -> the registered name
WORKFLOW_CLASS_PATHS = {
    "examples.learn_to_ask.workflow.workflow_learn2ask.Learn2AskWorkflow": "learn2ask_workflow",
}


def apply_older_spellings(cfg: Config) -> None:
    """Map the older keys of the module docstring onto their current ones, in place."""
    _priority_queue(cfg)
    _add_strategy(cfg)
    _workflow_class_paths(cfg)
    t = cfg.trainer
    if t.actor_grad_clip is not None:
        if t.grad_clip not in (None, t.actor_grad_clip):
            raise ConfigError(
                "trainer.actor_grad_clip",
                f"{t.actor_grad_clip} contradicts trainer.grad_clip {t.grad_clip}; keep only "
                "grad_clip (actor_grad_clip is its older spelling)",
                value=t.actor_grad_clip,
            )
        _warn("trainer.actor_grad_clip", "trainer.grad_clip")
        t.grad_clip, t.actor_grad_clip = t.actor_grad_clip, None
    args = cfg.algorithm.policy_loss_fn_args
    if isinstance(args, dict) and "loss_agg_mode" in args:
        # Trinity-RFT 0.6's validator overwrites it with algorithm.loss_agg_mode
        log.warning(
            "algorithm.policy_loss_fn_args.loss_agg_mode = %s: replaced by "
            "algorithm.loss_agg_mode (%s), as Trinity-RFT does; set that key to choose it",
            args["loss_agg_mode"],
            cfg.algorithm.loss_agg_mode or "the algorithm's default",
        )
        args.pop("loss_agg_mode")


def _priority_queue(cfg: Config) -> None:
    eb = cfg.buffer.trainer_input.experience_buffer
    if eb is None:
        return
    path = "buffer.trainer_input.experience_buffer"
    rb = eb.replay_buffer
    if rb is None and any(
        v is not None
        for v in (eb.use_priority_queue, eb.reuse_cooldown_time, eb.replay_buffer_kwargs)
    ):
        rb = eb.replay_buffer = ReplayBufferConfig()
    if eb.use_priority_queue is not None:
        _warn(f"{path}.use_priority_queue", f"{path}.replay_buffer.enable")
        rb.enable = bool(eb.use_priority_queue)
        eb.use_priority_queue = None
    if eb.reuse_cooldown_time is not None:
        _warn(f"{path}.reuse_cooldown_time", f"{path}.replay_buffer.reuse_cooldown_time")
        rb.reuse_cooldown_time = float(eb.reuse_cooldown_time)
        eb.reuse_cooldown_time = None
    if eb.replay_buffer_kwargs is not None:
        _warn(
            f"{path}.replay_buffer_kwargs",
            f"{path}.replay_buffer.priority_fn and .priority_fn_args",
        )
        kwargs = dict(eb.replay_buffer_kwargs)
        rb.priority_fn = str(kwargs.pop("priority_fn", rb.priority_fn))
        rb.priority_fn_args = kwargs
        eb.replay_buffer_kwargs = None


def _add_strategy(cfg: Config) -> None:
    a = cfg.algorithm
    if a.add_strategy is None:
        if a.add_strategy_args:
            log.warning("algorithm.add_strategy_args without add_strategy: no effect")
        a.add_strategy_args = None
        return
    path, name = "algorithm.add_strategy", a.add_strategy.strip().lower()
    if name in REFUSED_ADD_STRATEGIES:
        raise ConfigError(
            path,
            f"{a.add_strategy!r} (an older Trinity-RFT add strategy: "
            f"{REFUSED_ADD_STRATEGIES[name]}) is not implemented in RFT Studio; remove it",
            value=a.add_strategy,
        )
    if name not in ADD_STRATEGIES:
        raise ConfigError(
            path,
            f"{a.add_strategy!r} is not an add strategy Trinity-RFT had; the key is an older "
            f"spelling read for: {', '.join(ADD_STRATEGIES)} (use algorithm.advantage_fn now)",
            value=a.add_strategy,
            allowed=list(ADD_STRATEGIES),
        )
    args = dict(a.add_strategy_args or {})
    algorithm = ADD_STRATEGIES[name]
    if algorithm is not None:
        if a.algorithm_type not in ("grpo", algorithm):
            raise ConfigError(
                path,
                f"{name} is Trinity's step-wise GRPO grouping (now algorithm_type {algorithm}); "
                f"it contradicts algorithm_type {a.algorithm_type}: keep only algorithm_type",
                value=a.add_strategy,
            )
        log.warning(
            "%s = %s is an older spelling: read as algorithm.algorithm_type %s",
            path,
            name,
            algorithm,
        )
        _check_choice(algorithm, path)
        a.algorithm_type = algorithm
    else:
        if a.advantage_fn not in (None, name):
            raise ConfigError(
                path,
                f"{name} contradicts algorithm.advantage_fn {a.advantage_fn!r}; keep only "
                "advantage_fn (add_strategy is an older spelling)",
                value=a.add_strategy,
            )
        log.warning(
            "%s = %s is an older spelling: read as algorithm.advantage_fn %s", path, name, name
        )
        a.advantage_fn = name
    if args:
        log.warning("algorithm.add_strategy_args: read as algorithm.advantage_fn_args")
        a.advantage_fn_args = {**args, **a.advantage_fn_args}
    a.add_strategy = a.add_strategy_args = None


def _check_choice(algorithm: str, path: str) -> None:
    """The algorithm registry's verdict on ``algorithm`` (the choices and refusals of the
    ``algorithm_type`` field), reported at ``path``, the key the config wrote."""
    meta = next(f for f in dataclasses.fields(AlgorithmConfig) if f.name == "algorithm_type")
    choices = list(meta.metadata.get("choices") or [])
    if algorithm in choices:
        return
    refused = meta.metadata.get("refused") or {}
    why = refused.get(algorithm, "is not one of them")
    raise ConfigError(
        path,
        f"read as algorithm_type {algorithm!r}: {algorithm!r} {why}; implemented: "
        f"{', '.join(choices)}",
        value=algorithm,
        allowed=choices,
    )


def _warn(old: str, new: str) -> None:
    log.warning("%s is an older Trinity-RFT spelling: read as %s", old, new)


def _workflow_class_paths(cfg: Config) -> None:
    ei = cfg.buffer.explorer_input
    holders = [("", ei)] + ([("taskset.", ei.taskset)] if ei.taskset is not None else [])
    holders += [(f"tasksets[{i}].", ts) for i, ts in enumerate(ei.tasksets or [])]
    holders += [(f"eval_tasksets[{i}].", ts) for i, ts in enumerate(ei.eval_tasksets or [])]
    for where, ts in holders:
        name = WORKFLOW_CLASS_PATHS.get(getattr(ts, "default_workflow_type", None) or "")
        if name:
            path = f"buffer.explorer_input.{where}default_workflow_type"
            log.warning(
                "%s = %s: Trinity-RFT's example class, read as the registered workflow %r",
                path,
                ts.default_workflow_type,
                name,
            )
            ts.default_workflow_type = name
