"""Rollout engines behind one interface (``rft_core.rollout.base.RolloutEngine``).

``build_engine("hf" | "vllm" | "auto", model_path, ...)`` is the one entry point; the engine
type comes from ``explorer.rollout_model.engine_type``. Each type is a factory in the
``ENGINES`` registry that imports its engine only when called (vLLM is absent on CPU machines),
so a new engine is one decorated function here; the config's choices come from the registry.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import torch

from rft_core.config import Config
from rft_core.config.resources import auto_engine_type
from rft_core.config.rollout_schema import AuxiliaryModelConfig
from rft_core.errors import EngineUnavailable
from rft_core.registry import Registry
from rft_core.rollout.base import Generation, RolloutEngine, SamplingParams
from rft_core.rollout.hf import HFRolloutEngine
from rft_core.rollout.vllm import VLLMRolloutEngine
from rft_core.rollout.vllm_version import check_vllm_version

EngineFactory = Callable[..., RolloutEngine]
ENGINES: Registry[EngineFactory] = Registry("engine type", "explorer.rollout_model.engine_type")

VLLM_MISSING = (
    "vLLM is not installed; install rft-studio[vllm] on a GPU node or set "
    "explorer.rollout_model.engine_type: hf"
)


def vllm_usable() -> bool:
    """True when vLLM can be imported and a CUDA device is present."""
    return importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()


def engine_settings(cfg: Config) -> dict[str, Any]:
    """``build_engine`` keyword arguments from a validated config: ``explorer.rollout_model``
    (dtype, seed, the vLLM engine settings, ``extra_engine_args``), ``model.max_model_len`` and
    the chat template (``model.custom_chat_template``, ``model.enable_thinking``). The hf engine
    ignores the vLLM-only ones. ``tensor_parallel_size`` is left to the caller (an engine pool
    places its engines by it)."""
    model = cfg.model
    settings = _settings(
        cfg.explorer.rollout_model,
        max_model_len=model.max_model_len,
        max_prompt_tokens=model.max_prompt_tokens,
        chat_template=model.custom_chat_template,
        enable_thinking=model.enable_thinking,
    )
    return {**vllm_batch_settings(cfg), **settings}  # extra_engine_args win


def vllm_batch_settings(cfg: Config) -> dict[str, Any]:
    """The vLLM engine settings a run's shape decides (the hf engine ignores them):
    ``max_num_seqs`` = the rows of one explorer step's generate call (``buffer.batch_size x
    algorithm.repeat_times``), at least vLLM's default 256 so evals of more rows stay batched;
    ``enable_sleep_mode`` in ``mode: colocate`` (``release_memory`` frees vLLM's memory while
    the trainer steps)."""
    repeat = getattr(cfg.algorithm, "repeat_times", None) or 1
    out: dict[str, Any] = {"max_num_seqs": max(256, int(cfg.buffer.batch_size) * int(repeat))}
    if cfg.mode == "colocate":
        out["enable_sleep_mode"] = True
    return out


def auxiliary_engine_settings(aux: AuxiliaryModelConfig) -> dict[str, Any]:
    """``build_engine`` keyword arguments of one ``explorer.auxiliary_models`` entry: its own
    lengths and chat template, never the policy model's."""
    return _settings(
        aux,
        max_model_len=aux.max_model_len,
        max_prompt_tokens=aux.max_prompt_tokens,
        chat_template=aux.chat_template,
        enable_thinking=aux.enable_thinking,
    )


def _settings(
    entry: Any,
    *,
    max_model_len: int | None,
    max_prompt_tokens: int | None,
    chat_template: str | None,
    enable_thinking: bool | None,
) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "dtype": entry.dtype,
        "seed": entry.seed,
        "max_model_len": max_model_len,
        "max_prompt_tokens": max_prompt_tokens,
        "gpu_memory_utilization": entry.gpu_memory_utilization,
        "enforce_eager": entry.enforce_eager,
        "enable_prefix_caching": entry.enable_prefix_caching,
        "enable_chunked_prefill": entry.enable_chunked_prefill,
        **entry.extra_engine_args,
    }
    if chat_template:
        settings["chat_template"] = chat_template
    if enable_thinking is not None:
        settings["chat_template_kwargs"] = {"enable_thinking": enable_thinking}
    return settings


@ENGINES.register("hf")
def _hf(model_path: str, **settings: Any) -> RolloutEngine:
    return HFRolloutEngine(model_path, **settings)


@ENGINES.register("vllm")
def _vllm(model_path: str, *, device: str | None = None, **settings: Any) -> RolloutEngine:
    try:
        import vllm
    except ImportError as err:
        raise EngineUnavailable(VLLM_MISSING) from err
    check_vllm_version(str(getattr(vllm, "__version__", "unknown")))  # one line, in the actor too

    return VLLMRolloutEngine(model_path, **settings)  # vLLM places itself: no device


@ENGINES.register("auto")
def _auto(model_path: str, **settings: Any) -> RolloutEngine:
    """The engine ``rft_core.config.resources.auto_engine_type`` picks: vLLM for an engine over
    several GPUs when it is usable, else hf (measured faster on one GPU)."""

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    tp = int(settings.get("tensor_parallel_size", 1))
    name = auto_engine_type(gpus, tp, vllm_usable())
    return ENGINES.get(name)(model_path, **settings)


def build_engine(
    engine_type: str,
    model_path: str,
    *,
    dtype: str = "auto",
    device: str | None = None,
    seed: int = 0,
    max_model_len: int | None = None,
    **engine_kwargs: Any,
) -> RolloutEngine:
    """Build the rollout engine named by ``engine_type`` (an ``ENGINES`` name: "hf", "vllm", or
    "auto": ``_auto``'s choice)."""
    factory = ENGINES.get((engine_type or "auto").lower())
    return factory(
        model_path,
        dtype=dtype,
        device=device,
        seed=seed,
        max_model_len=max_model_len,
        **engine_kwargs,
    )


__all__ = [
    "ENGINES",
    "Generation",
    "RolloutEngine",
    "SamplingParams",
    "auxiliary_engine_settings",
    "build_engine",
    "engine_settings",
    "vllm_usable",
]
