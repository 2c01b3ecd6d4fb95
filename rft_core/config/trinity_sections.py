"""Trinity-RFT sections that RFT Studio accepts without acting on them, so that other users'
configs load: over-rollout, dynamic timeouts, Megatron parallelism, LoRA,
Tinker, external models, the Data-Juicer service and the data processor's pipelines.

The schema (``schema.py``, ``buffer_schema.py``) holds them as fields flagged
``unimplemented`` (``ReplayBufferConfig`` and ``LogConfig`` are here too, but implemented:
``rft_core.buffer.replay``, ``rft_core.runtime.run_log``); ``rft_core.config.trinity_compat``
warns when a config sets one. Field
names, types and defaults follow Trinity-RFT's ``trinity/common/config.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rft_core.config.meta import config_field as _field


@dataclass
class ReplayBufferConfig:
    """Priority replay of queue experiences (Trinity's ``replay_buffer``; ``rft_core.buffer.replay``)."""

    enable: bool = _field(
        False,
        "queue storage: the trainer reads the highest-priority explorer batch first, and a read "
        "batch comes back after reuse_cooldown_time (capacity counts batches)",
    )
    priority_fn: str = _field(
        "linear_decay",
        "linear_decay (model_version - decay x use_count) or decay_limit_randomization (the same "
        "plus Gaussian noise sigma; reused at most use_count_limit times)",
        choices=["linear_decay", "decay_limit_randomization"],
    )
    reuse_cooldown_time: float | None = _field(
        None, "seconds before a read batch is offered again (None: never reused)"
    )
    priority_fn_args: dict[str, Any] = _field(
        help="decay (2.0); decay_limit_randomization also use_count_limit (3) and sigma (0.0)",
        factory=lambda: {"decay": 2.0},
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
    """The run's log on stderr (``rft_core.runtime.run_log``); each actor's own log file is
    ``<job_dir>/log/<role>.log`` either way."""

    level: str = _field(
        "info",
        "level of `trinity run`'s log on stderr: info tells stage and role starts and ends, "
        "evals, checkpoints and a progress line (outside a terminal; a bar in one); warning: "
        "warnings and errors only (as --quiet)",
        choices=["debug", "info", "warning", "error"],
    )
    progress_steps: int = _field(
        10, "outside a terminal, a progress line every N steps of the stage (or progress_seconds)"
    )
    progress_seconds: float = _field(
        30.0, "outside a terminal, a progress line at least this often (seconds) while a stage runs"
    )
    group_by_node: bool = _field(False, "one log directory per Ray node", unimplemented=True)


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
