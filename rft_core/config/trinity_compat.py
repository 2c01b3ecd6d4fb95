"""Trinity-RFT keys that RFT Studio accepts without acting on them, so that other users' configs load.

Three kinds, each said out loud at run time (never silently ignored):

- sections and settings we do not implement (LoRA, Megatron parallelism, Tinker, data
  processors, over-rollout, ...): the dataclasses of ``rft_core.config.trinity_sections``, the
  fields flagged ``unimplemented`` in ``rft_core.config.schema``, and the auxiliary buffers /
  sample-strategy args no mix algorithm reads (``rft_core.config.expert_data``), and the
  ``trainer.trainer_config`` keys with no setting here (``rft_core.config.trainer_config``);
  :func:`warn_unimplemented` logs one warning per key a config sets to anything but Trinity's
  default;
- deprecated spellings Trinity-RFT 0.6 still accepts (``explorer.runner_num``,
  ``algorithm.optimizer.warmup_style``, ``taskset.task_selector``) and two older ones
  (``trainer.ppo_max_token_len_per_gpu``, ``buffer.max_retry_times``): :func:`apply_deprecated`
  maps each onto its current key with a warning, or warns that it has no effect; keys of
  Trinity 0.1 - 0.2 (``use_priority_queue``, ``add_strategy``, ...) the same way
  (``rft_core.config.trinity_older``);
- ``explorer.rollout_model`` lengths and chat settings that Trinity lets override ``model``'s:
  :func:`fold_rollout_model_overrides` moves them into ``model`` when ``model`` leaves them unset
  (one engine serves both, so they cannot differ) and warns when both are set and differ.

These functions act on a loaded config (``rft_core.config.validate`` calls them); the schema
does not import them.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from rft_core.config.buffer_schema import DataSelectorConfig
from rft_core.config.expert_data import unused_mix_settings
from rft_core.config.problems import refuse
from rft_core.config.schema import LR_SCHEDULES
from rft_core.config.trainer_config import unmapped_trainer_config
from rft_core.config.trinity_older import apply_older_spellings
from rft_core.errors import ConfigError

if TYPE_CHECKING:
    from rft_core.config.schema import Config

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- warnings


def unimplemented_settings(cfg: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """``(yaml path, value)`` of every ``unimplemented`` field of ``cfg`` (a Config or a section,
    as written) whose value differs from Trinity's default, depth first."""
    found: list[tuple[str, Any]] = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        path = f"{prefix}.{f.name}" if prefix else f.name
        if f.metadata.get("unimplemented"):
            if _plain(value) != _default(f):
                found.append((path, _plain(value)))
        elif dataclasses.is_dataclass(value):
            found.extend(unimplemented_settings(value, path))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if dataclasses.is_dataclass(item):
                    found.extend(unimplemented_settings(item, f"{path}[{i}]"))
    if not prefix and hasattr(cfg, "buffer") and hasattr(cfg, "algorithm"):
        found.extend(unused_mix_settings(cfg))  # free-form dicts only mix algorithms read
        found.extend(unmapped_trainer_config(cfg))  # verl keys with no setting here
    return found


def warn_unimplemented(cfg: Config) -> list[tuple[str, Any]]:
    """Log one warning per setting of :func:`unimplemented_settings`; returns them."""
    found = unimplemented_settings(cfg)
    log_unimplemented(found)
    return found


def log_unimplemented(found: list[tuple[str, Any]]) -> None:
    """One warning per ``(yaml path, value)`` of :func:`unimplemented_settings`: the load says
    them, and each actor again in its own log from the list the validator recorded."""
    for path, value in found:
        log.warning(
            "%s = %s: accepted for Trinity-RFT compatibility, but RFT Studio does not implement "
            "it; it has no effect on this run",
            path,
            _short(value),
        )


def apply_deprecated(cfg: Config) -> None:
    """Map deprecated spellings onto their current keys (or warn that they have no effect)."""
    e, o, t, b = cfg.explorer, cfg.algorithm.optimizer, cfg.trainer, cfg.buffer
    if e.runner_num is not None:
        log.warning(
            "explorer.runner_num = %s is deprecated in Trinity-RFT and has no effect; "
            "set explorer.runner_per_model (now %s)",
            e.runner_num,
            e.runner_per_model,
        )
        e.runner_num = None
    if o.warmup_style is not None:
        path = "algorithm.optimizer.warmup_style"
        style = o.warmup_style.strip().lower()
        if style not in LR_SCHEDULES:
            refuse(
                ConfigError(
                    path,
                    f"{o.warmup_style!r} is not one of {', '.join(LR_SCHEDULES)}",
                    value=o.warmup_style,
                    allowed=list(LR_SCHEDULES),
                )
            )
        elif o.lr_scheduler_type not in ("constant", style):
            refuse(
                ConfigError(
                    path,
                    f"{style!r} contradicts algorithm.optimizer.lr_scheduler_type "
                    f"{o.lr_scheduler_type!r}; keep only lr_scheduler_type (warmup_style is deprecated)",
                    value=o.warmup_style,
                )
            )
        else:
            log.warning("%s is deprecated: read as lr_scheduler_type %s", path, style)
            o.lr_scheduler_type = style
        o.warmup_style = None
    if t.ppo_max_token_len_per_gpu is not None:
        path = "trainer.ppo_max_token_len_per_gpu"
        if t.max_token_len_per_gpu not in (None, t.ppo_max_token_len_per_gpu):
            refuse(
                ConfigError(
                    path,
                    f"{t.ppo_max_token_len_per_gpu} contradicts trainer.max_token_len_per_gpu "
                    f"{t.max_token_len_per_gpu}; keep only max_token_len_per_gpu",
                    value=t.ppo_max_token_len_per_gpu,
                )
            )
        else:
            log.warning("%s is an old name: read as trainer.max_token_len_per_gpu", path)
            t.max_token_len_per_gpu = t.ppo_max_token_len_per_gpu
        t.ppo_max_token_len_per_gpu = None
    for key in ("max_retry_times", "max_retry_interval"):
        if getattr(b, key) is not None:
            log.warning(
                "buffer.%s = %s is an old key with no effect: set it on each sql taskset / "
                "experience_buffer instead",
                key,
                getattr(b, key),
            )
            setattr(b, key, None)

    apply_older_spellings(cfg)  # use_priority_queue, add_strategy, data_processor_url
    ei = b.explorer_input
    tasksets = [("taskset", ei.taskset)] if ei.taskset is not None else []
    tasksets += [(f"tasksets[{i}]", ts) for i, ts in enumerate(ei.tasksets)]
    tasksets += [(f"eval_tasksets[{i}]", ts) for i, ts in enumerate(ei.eval_tasksets)]
    for where, ts in tasksets:
        if ts.task_selector is None:
            continue
        path = f"buffer.explorer_input.{where}"
        if ts.data_selector != DataSelectorConfig() and ts.data_selector != ts.task_selector:
            refuse(
                ConfigError(
                    f"{path}.task_selector",
                    f"contradicts {path}.data_selector; keep only data_selector (task_selector is deprecated)",
                )
            )
        else:
            log.warning("%s.task_selector is deprecated: read as data_selector", path)
            ts.data_selector = ts.task_selector
        ts.task_selector = None


# rollout_model key -> model key that it overrides in Trinity (``None`` there: use model's)
_ROLLOUT_OVERRIDES = {
    "max_model_len": "max_model_len",
    "max_prompt_tokens": "max_prompt_tokens",
    "max_response_tokens": "max_response_tokens",
    "min_response_tokens": "min_response_tokens",
    "enable_prompt_truncation": "enable_prompt_truncation",
    "repetition_penalty": "repetition_penalty",
    "chat_template": "custom_chat_template",
    "enable_thinking": "enable_thinking",
    "trust_remote_code": "trust_remote_code",
}


def fold_rollout_model_overrides(cfg: Config) -> None:
    """Move ``explorer.rollout_model`` overrides into ``model`` (see the module docstring)."""
    rm, m = cfg.explorer.rollout_model, cfg.model
    defaults = {f.name: _default(f) for f in dataclasses.fields(m)}
    for rm_key, m_key in _ROLLOUT_OVERRIDES.items():
        value = getattr(rm, rm_key)
        if value is None or value is False and rm_key == "trust_remote_code":
            continue
        current = getattr(m, m_key)
        if current == defaults[m_key]:
            setattr(m, m_key, value)
        elif current != value:
            log.warning(
                "explorer.rollout_model.%s = %s differs from model.%s = %s: RFT Studio uses one "
                "setting for rollouts and training, model.%s",
                rm_key,
                _short(value),
                m_key,
                _short(current),
                m_key,
            )
        setattr(rm, rm_key, False if rm_key == "trust_remote_code" else None)


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return _plain(f.default_factory())
    return f.default


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
