"""The model helpers the rollout engines and the trainer share, so that both sides of the
importance ratio load, place and score a model the same way: the device and dtype a model runs
in, the log-prob of a token, whether a model's KV cache is plain full attention, and the CPU
attention kernel both the trainer's forwards and the hf engine's prefill run.

LOG-PROB CONVENTION (``token_logprobs``): the log-prob of a token is
``log_softmax(logits / temperature)[token]``, computed in fp32 before any top-k/top-p filtering,
as verl's actor recomputes it. The hf engine samples under it and the trainer recomputes under
it, so an on-policy ratio is 1 up to numerics.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from rft_core import dtypes


def resolve_device(device: str | None) -> torch.device:
    """``None``/"auto" → the first CUDA device when there is one, else the CPU."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """ "auto" → bf16 on CUDA, fp32 on CPU (bf16 matmuls are slow on most CPUs); any other name
    or alias through ``rft_core.dtypes``."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, dtypes.AUTO):
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return dtypes.torch_dtype(dtype)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """Log-prob of ``tokens`` under ``softmax(logits / temperature)`` in fp32 (see module doc).

    ``logits``: (..., vocab); ``tokens``: (...). Shared by the engine and the trainer so that both
    sides of the importance ratio use one formula.
    """
    logits = logits.float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def full_attention_cache(model: Any) -> bool:
    """Whether ``model`` keeps a plain full-attention KV cache (no sliding-window, recurrent or
    other layer kinds), so that a prompt's cache can be shared by several rows exactly."""
    if getattr(model, "_is_stateful", False):
        return False
    layers = DynamicCache(config=model.config).layers
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


GROUPED_SDPA_ATTENTION = "rft_grouped_sdpa"


def grouped_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa`` attention, except that a masked call with grouped-query heads
    hands the key/value heads to torch's kernel as they are (``enable_gqa``) where transformers
    copies each of them once per query head of its group (it does so on CPU and CUDA alike,
    since CUDA's fast kernels take no mask with ``enable_gqa``; on CPU it is the same kernel,
    without the copies in the forward and their sum in the backward)."""
    groups = getattr(module, "num_key_value_groups", 1)
    plain = attention_mask is None or attention_mask.dtype != torch.bool
    if groups == 1 or plain or any(kwargs.get(k) is not None for k in ("position_bias", "softcap")):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    out = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        enable_gqa=True,
    )
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(GROUPED_SDPA_ATTENTION, grouped_sdpa_attention)
AttentionMaskInterface.register(GROUPED_SDPA_ATTENTION, sdpa_mask)


@contextlib.contextmanager
def cpu_attention(model: Any) -> Iterator[None]:
    """While in the block, a CPU model on transformers' ``sdpa`` attention runs
    ``grouped_sdpa_attention`` instead (same results); any other model is left as it is, and
    so is one under activation checkpointing (its backward recomputes outside the block)."""
    config = model.config
    before = config._attn_implementation
    checkpointed = getattr(model, "is_activation_checkpointing", False)
    if before != "sdpa" or model.device.type != "cpu" or checkpointed:
        yield
        return
    config._attn_implementation = GROUPED_SDPA_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = before
