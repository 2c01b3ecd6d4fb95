"""The rollout engines' part of the config schema: ``explorer.rollout_model`` and each
``explorer.auxiliary_models`` entry (re-exported by ``rft_core.config.schema``; the field
metadata conventions are that module's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rft_core.config.committed_names import registered_choices
from rft_core.config.meta import BEGINNER
from rft_core.config.meta import config_field as _field
from rft_core.dtypes import AUTO, SHORT_ALIASES, WEIGHT_DTYPES


@dataclass
class RolloutModelConfig:
    engine_type: str = _field(
        "auto",
        "rollout engine: hf (transformers, CPU or GPU), vllm (GPU); auto = hf for an engine of one GPU (measured faster there), vllm for tensor_parallel_size > 1 when vLLM is installed",
        choices=registered_choices("engine_types"),
        aliases={"transformers": "hf", "vllm_async": "vllm"},
    )
    engine_num: int = _field(1, "rollout engines")
    tensor_parallel_size: int = _field(1, "GPUs per rollout engine")
    gpu_memory_utilization: float = _field(
        0.9, "vLLM GPU memory fraction", show_when={".engine_type": ["vllm"]}
    )
    enforce_eager: bool = _field(
        False, "no CUDA graphs: vLLM's, and the hf engine's captured decoding step on CUDA"
    )
    enable_prefix_caching: bool = _field(
        True, "vLLM prefix caching", show_when={".engine_type": ["vllm"]}
    )
    enable_chunked_prefill: bool = _field(
        True, "vLLM chunked prefill", show_when={".engine_type": ["vllm"]}
    )
    use_v1: bool = _field(
        True,
        "accepted for Trinity compatibility (vLLM's v1 engine is used)",
        show_when={".engine_type": ["vllm"]},
    )
    dtype: str = _field(
        "auto",
        "rollout weights dtype (auto: bfloat16 on GPU, float32 on CPU)",
        choices=[AUTO, *WEIGHT_DTYPES],
        aliases=SHORT_ALIASES,
    )
    seed: int = _field(42, "sampling seed")
    extra_engine_args: dict[str, Any] = _field(
        help="free-form engine keyword arguments", factory=dict
    )
    max_model_len: int | None = _field(
        None,
        "rollout prompt + response tokens (None: model's; fills model.max_model_len when that is unset)",
    )
    max_prompt_tokens: int | None = _field(
        None,
        "longest rollout prompt (None: model's; fills model.max_prompt_tokens when that is unset)",
    )
    max_response_tokens: int | None = _field(
        None,
        "longest rollout response (None: model's; fills model.max_response_tokens when that is unset)",
    )
    chat_template: str | None = _field(
        None,
        "chat template of rollouts (None: model's; fills model.custom_chat_template when that is unset)",
    )
    enable_thinking: bool | None = _field(
        None,
        "thinking switch of rollouts (None: model's; fills model.enable_thinking when that is unset)",
    )
    trust_remote_code: bool = _field(False, "allow model code (true sets model.trust_remote_code)")
    name: str | None = _field(
        None, "model name the run's OpenAI endpoint serves the policy under (None: model_path)"
    )
    data_parallel_size: int = _field(1, "data parallel size per engine", unimplemented=True)
    pipeline_parallel_size: int = _field(1, "pipeline parallel size per engine", unimplemented=True)
    enable_expert_parallel: bool = _field(False, "expert parallelism (MoE)", unimplemented=True)
    min_response_tokens: int | None = _field(None, "shortest rollout response", unimplemented=True)
    enable_prompt_truncation: bool | None = _field(
        None, "truncate rollout prompts", unimplemented=True
    )
    repetition_penalty: float | None = _field(
        None, "rollout repetition penalty", unimplemented=True
    )
    ignore_eos: bool = _field(False, "generate past the end-of-sequence token", unimplemented=True)
    enable_multimodal: bool = _field(False, "multi-modal inputs", unimplemented=True)
    enable_history: bool = _field(
        False,
        "record the OpenAI endpoint's calls (agent workflows always record theirs: each call is an experience)",
    )
    enable_openai_api: bool = _field(
        False,
        "serve an OpenAI-compatible API for workflows (an agent workflow starts it on 127.0.0.1 with a per-run key, true or false)",
    )
    enable_log_requests: bool = _field(False, "log requests of the API server", unimplemented=True)
    base_port: int | None = _field(None, "first port of the API servers", unimplemented=True)
    api_key: str = _field("EMPTY", "API key of the API servers", unimplemented=True)
    enable_auto_tool_choice: bool = _field(
        False,
        "API: tool calls in replies are parsed (Hermes <tool_call> blocks) whenever a request gives tools",
    )
    tool_call_parser: str | None = _field(None, "API: tool-call parser", unimplemented=True)
    reasoning_parser: str | None = _field(None, "API: reasoning parser", unimplemented=True)
    weight_sync_buffer_size: int = _field(
        1024, "MB per NCCL weight-sync bucket", unimplemented=True
    )


@dataclass
class AuxiliaryModelConfig(RolloutModelConfig):
    """One ``explorer.auxiliary_models`` entry (Trinity's ``InferenceModelConfig``): a second
    model, such as a judge or reward model, that workflows query; its own engine runs beside
    the policy's and never receives the trainer's weights."""

    model_path: str = _field(
        "", "the auxiliary model (HF repo id or local directory)", level=BEGINNER
    )
    temperature: float | None = _field(
        None, "sampling temperature of its replies (None: 0, greedy: a judge scores alike)"
    )
    top_p: float | None = _field(None, "top-p of its replies (None: 1.0)")
    top_k: int | None = _field(None, "top-k of its replies (None: off)")
    logprobs: int | None = _field(None, "accepted for Trinity compatibility (no effect)")
    max_model_len: int | None = _field(None, "its prompt + response tokens (None: the model's)")
    max_prompt_tokens: int | None = _field(None, "its longest prompt (longer prompts keep the end)")
    max_response_tokens: int | None = _field(
        None, "its longest reply (None: model.max_response_tokens)"
    )
    chat_template: str | None = _field(None, "its chat template (None: the model's)")
    enable_thinking: bool | None = _field(
        None, "its thinking switch (None: the template's default)"
    )
