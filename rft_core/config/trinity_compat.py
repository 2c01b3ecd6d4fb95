"""Trinity-RFT keys that RFT Studio accepts without acting on them, so that other users' configs load.

Three kinds, each said out loud at run time (never silently ignored):

- sections and settings we do not implement (LoRA, Megatron parallelism, Tinker, data
  processors, over-rollout, ...): the dataclasses below and the fields flagged
  ``unimplemented`` in ``rft_core.config.schema``; :func:`warn_unimplemented` logs one warning
  per key a config sets to anything but Trinity's default;
- deprecated spellings Trinity-RFT 0.6 still accepts (``explorer.runner_num``,
  ``algorithm.optimizer.warmup_style``, ``taskset.task_selector``) and two older ones
  (``trainer.ppo_max_token_len_per_gpu``, ``buffer.max_retry_times``): :func:`apply_deprecated`
  maps each onto its current key with a warning, or warns that it has no effect;
- ``explorer.rollout_model`` lengths and chat settings that Trinity lets override ``model``'s:
  :func:`fold_rollout_model_overrides` moves them into ``model`` when ``model`` leaves them unset
  (one engine serves both, so they cannot differ) and warns when both are set and differ.

Field names, types and defaults follow Trinity-RFT's ``trinity/common/config.py``.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from rft_core.config.meta import config_field as _field
from rft_core.errors import ConfigError

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- sections we accept but do not implement


@dataclass
class ReplayBufferConfig:
    """Priority replay of queue experiences (Trinity's ``replay_buffer``)."""

    enable: bool = _field(False, "reuse experiences from the queue by priority")
    priority_fn: str = _field("linear_decay", "priority function of replayed experiences")
    reuse_cooldown_time: float | None = _field(None, "seconds before an experience is reused")
    priority_fn_args: dict[str, Any] = _field(
        help="free-form arguments of the priority function", factory=lambda: {"decay": 2.0}
    )


@dataclass
class OverRolloutConfig:
    ratio: float = _field(
        0.0, "the explorer waits for only (1 - ratio) x batch_size tasks per step"
    )
    wait_after_min: float = _field(30.0, "seconds to wait after the minimum is reached")
    return_partial_tasks: bool = _field(False, "keep tasks with some runs finished")


@dataclass
class DynamicTimeoutConfig:
    enable: bool = _field(False, "per-step timeout from the average task time")
    warmup_min_steps: int = _field(1, "fully observed steps before it applies")
    ratio: float = _field(3.0, "timeout = min(max_timeout, average task time x ratio)")


@dataclass
class MegatronParallelConfig:
    """Megatron-Core parallelism of the trainer (``trainer.trainer_strategy: megatron``)."""

    tensor_model_parallel_size: int = _field(1, "tensor parallel size")
    pipeline_model_parallel_size: int = _field(1, "pipeline parallel size")
    virtual_pipeline_model_parallel_size: int | None = _field(None, "virtual pipeline size")
    expert_model_parallel_size: int = _field(1, "expert parallel size")
    expert_tensor_parallel_size: int | None = _field(None, "expert tensor parallel size")
    context_parallel_size: int = _field(1, "context parallel size")
    sequence_parallel: bool = _field(True, "sequence parallelism")


@dataclass
class LoRAConfig:
    name: str | None = _field(None, "adapter name")
    path: str | None = _field(None, "existing adapter to start from")
    base_model_name: str | None = _field(None, "base model of the adapter")
    lora_rank: int = _field(32, "LoRA rank")
    lora_alpha: int = _field(32, "LoRA alpha")
    lora_dtype: str = _field("auto", "adapter dtype")
    target_modules: str = _field("all-linear", "modules that get adapters")
    exclude_modules: str | None = _field(None, "modules that get none")


@dataclass
class TinkerConfig:
    enable: bool = _field(False, "train through the Tinker service")
    rank: int = _field(16, "LoRA rank on Tinker")
    seed: int | None = _field(None, "seed")
    train_mlp: bool = _field(True, "train MLP layers")
    train_attn: bool = _field(True, "train attention layers")
    train_unembed: bool = _field(True, "train the unembedding")
    base_url: str | None = _field(None, "Tinker service URL")


@dataclass
class ExternalModelConfig:
    enable: bool = _field(False, "roll out with an OpenAI-compatible API instead of a local engine")
    base_url_env: str = _field("OPENAI_BASE_URL", "environment variable holding the API URL")
    api_key_env: str = _field("OPENAI_API_KEY", "environment variable holding the API key")
    model_name: str | None = _field(None, "model name at the API")


@dataclass
class LogConfig:
    level: str = _field("INFO", "log level of the actors (DEBUG, INFO, WARNING, ERROR)")
    group_by_node: bool = _field(False, "one log directory per Ray node")


@dataclass
class DataJuicerServiceConfig:
    server_url: str | None = _field(None, "URL of a running Data-Juicer server")
    auto_start: bool = _field(False, "start a Data-Juicer server")
    port: int | None = _field(None, "port of the started server (None: random)")


@dataclass
class ServiceConfig:
    data_juicer: DataJuicerServiceConfig | None = _field(None, "Data-Juicer service")


@dataclass
class OperatorConfig:
    name: str = _field("", "operator name")
    args: dict[str, Any] = _field(help="free-form operator arguments", factory=dict)


@dataclass
class TaskPipelineConfig:
    operators: list[OperatorConfig] = _field(help="Data-Juicer operators, in order", factory=list)
    num_process: int = _field(4, "worker processes")
    config_path: str | None = _field(None, "Data-Juicer config file (replaces operators)")
    inputs: list[str] = _field(help="raw task files", factory=list)
    output: dict[str, Any] | None = _field(
        None, "output taskset (None: buffer.explorer_input.taskset)"
    )
    target_fields: list[str] = _field(help="fields processed into the output", factory=list)
    priority_weights: dict[str, float] = _field(help="weights of priority terms", factory=dict)
    top_k: int = _field(-1, "tasks kept after the pipeline (-1: all)")


@dataclass
class ExperiencePipelineConfig:
    operators: list[OperatorConfig] = _field(help="experience operators, in order", factory=list)
    save_input: bool = _field(True, "save the experiences entering the pipeline")
    input_save_path: str | None = _field(None, "where they are saved (.jsonl or sqlite)")
    inputs: dict[str, Any] = _field(help="extra input buffers by name", factory=dict)
    output: dict[str, Any] | None = _field(None, "output buffer (None: the trainer input)")


@dataclass
class DataProcessorConfig:
    task_pipeline: TaskPipelineConfig | None = _field(None, "task preprocessing")
    experience_pipeline: ExperiencePipelineConfig = _field(
        help="experience processing", factory=ExperiencePipelineConfig
    )


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
    return found


def warn_unimplemented(cfg: Any) -> list[tuple[str, Any]]:
    """Log one warning per setting of :func:`unimplemented_settings`; returns them."""
    found = unimplemented_settings(cfg)
    for path, value in found:
        log.warning(
            "%s = %s: accepted for Trinity-RFT compatibility, but RFT Studio does not implement "
            "it; it has no effect on this run",
            path,
            _short(value),
        )
    return found


def apply_deprecated(cfg: Any) -> None:
    """Map deprecated spellings onto their current keys (or warn that they have no effect)."""
    from rft_core.config.schema import DataSelectorConfig

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
        choices = ["constant", "cosine", "linear"]
        if style not in choices:
            raise ConfigError(
                path, f"{o.warmup_style!r} is not one of {', '.join(choices)}", value=o.warmup_style
            )
        if o.lr_scheduler_type not in ("constant", style):
            raise ConfigError(
                path,
                f"{style!r} contradicts algorithm.optimizer.lr_scheduler_type "
                f"{o.lr_scheduler_type!r}; keep only lr_scheduler_type (warmup_style is deprecated)",
                value=o.warmup_style,
            )
        log.warning("%s is deprecated: read as lr_scheduler_type %s", path, style)
        o.lr_scheduler_type, o.warmup_style = style, None
    if t.ppo_max_token_len_per_gpu is not None:
        path = "trainer.ppo_max_token_len_per_gpu"
        if t.max_token_len_per_gpu not in (None, t.ppo_max_token_len_per_gpu):
            raise ConfigError(
                path,
                f"{t.ppo_max_token_len_per_gpu} contradicts trainer.max_token_len_per_gpu "
                f"{t.max_token_len_per_gpu}; keep only max_token_len_per_gpu",
                value=t.ppo_max_token_len_per_gpu,
            )
        log.warning("%s is an old name: read as trainer.max_token_len_per_gpu", path)
        t.max_token_len_per_gpu, t.ppo_max_token_len_per_gpu = t.ppo_max_token_len_per_gpu, None
    for key in ("max_retry_times", "max_retry_interval"):
        if getattr(b, key) is not None:
            log.warning(
                "buffer.%s = %s is an old key with no effect: set it on each sql taskset / "
                "experience_buffer instead",
                key,
                getattr(b, key),
            )
            setattr(b, key, None)
    ei = b.explorer_input
    tasksets = [("taskset", ei.taskset)] if ei.taskset is not None else []
    tasksets += [(f"tasksets[{i}]", ts) for i, ts in enumerate(ei.tasksets)]
    tasksets += [(f"eval_tasksets[{i}]", ts) for i, ts in enumerate(ei.eval_tasksets)]
    for where, ts in tasksets:
        if ts.task_selector is None:
            continue
        path = f"buffer.explorer_input.{where}"
        if ts.data_selector != DataSelectorConfig() and ts.data_selector != ts.task_selector:
            raise ConfigError(
                f"{path}.task_selector",
                f"contradicts {path}.data_selector; keep only data_selector (task_selector is deprecated)",
            )
        log.warning("%s.task_selector is deprecated: read as data_selector", path)
        ts.data_selector, ts.task_selector = ts.task_selector, None


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


def fold_rollout_model_overrides(cfg: Any) -> None:
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
