"""The policy trainer's models: the policy it trains, the frozen reference model (loaded once
from ``model_path`` when a KL term or DPO needs it), the PPO critic, and where they live.

Devices and dtypes: fp32 on CPU; on one CUDA trainer (``dtype: auto``) bf16 parameters with
fp32 master weights in the optimizer (``master_weights``); an explicit dtype trains in it. ``compile_scope`` fuses the element-wise work
of the policy's and the reference's decoder layers (``fusion``). With several trainer ranks each decoder layer
is FSDP2 ``fully_shard``-ed (bf16 params, fp32 reduce on CUDA; fp32 on CPU ranks over gloo),
and FSDP2 casts the parameters itself, so there is no autocast. The tests run on CPU only; the
CUDA and FSDP2-on-GPU paths are not tested here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from transformers import AutoModelForCausalLM, AutoTokenizer

from rft_core.modeling import resolve_dtype
from rft_core.trainer.critic import Critic
from rft_core.trainer.fusion import compile_model


@dataclass
class PolicyModels:
    tokenizer: Any
    pad_token_id: int
    model: Any  # the policy, trained
    ref_model: Any | None  # frozen; None when no KL term or DPO needs it
    device: torch.device  # where this process's parameters (or its shards) live
    master_weights: bool = False  # bf16 parameters, fp32 masters in the optimizer


def load_policy_models(
    model_path: str | Path,
    *,
    device: torch.device,
    dtype: str | None,
    needs_reference: bool,
    gradient_checkpointing: bool,
    sharded: bool,
    compile_scope: str | None = None,
) -> PolicyModels:
    """Tokenizer, policy and (``needs_reference``) reference model from ``model_path``, on
    ``device``, sharded with FSDP2 when ``sharded``."""
    # "auto" on CUDA: bf16 parameters with fp32 masters (master_weights), or, FSDP2-sharded,
    # fp32 parameters FSDP2 casts to bf16; an explicit dtype trains in it
    explicit = resolve_dtype(dtype, device) if dtype not in (None, "auto") else None
    master_weights = uses_master_weights(explicit, device, sharded)
    param_dtype = explicit or (torch.bfloat16 if master_weights else torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    pad = tokenizer.pad_token_id
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=param_dtype)
    model.config.use_cache = False
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ref_model = None
    if needs_reference:
        # the frozen reference needs no fp32 copy: on CUDA it runs in bf16
        ref_dtype = torch.bfloat16 if explicit is None and device.type == "cuda" else param_dtype
        ref_model = AutoModelForCausalLM.from_pretrained(model_path, dtype=ref_dtype)
        ref_model.requires_grad_(False).eval()
    if compile_scope is not None:
        for one in (model, ref_model):
            if one is not None:
                compile_model(one, compile_scope)
    if sharded:
        device = fully_shard_models([model, ref_model], device)  # FSDP2 casts parameters itself
    else:
        model.to(device)
        if ref_model is not None:
            ref_model.to(device)
    return PolicyModels(
        tokenizer=tokenizer,
        pad_token_id=pad if pad is not None else (tokenizer.eos_token_id or 0),
        model=model,
        ref_model=ref_model,
        device=device,
        master_weights=master_weights,
    )


def uses_master_weights(explicit: torch.dtype | None, device: torch.device, sharded: bool) -> bool:
    """``dtype: auto`` on one CUDA trainer: bf16 parameters with fp32 masters."""
    return explicit is None and device.type == "cuda" and not sharded


def fully_shard_models(models: list[Any], device: torch.device) -> torch.device:
    """FSDP2 ``fully_shard`` on each decoder layer and each whole model (None: skipped); returns
    the device, with "cuda" made the GPU Ray gave this rank's process."""
    if device.type == "cuda":
        if device.index is None:  # "cuda": the GPU Ray gave this rank's process
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    else:
        mp = MixedPrecisionPolicy()  # CPU ranks (gloo) train in fp32
    for model in models:
        if model is None:
            continue
        model.to(device)
        for layer in model.model.layers:
            fully_shard(layer, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    return device


def build_critic(
    model_path: str | Path,
    optimizer: dict[str, Any],
    *,
    device: torch.device,
    grad_clip: float,
    autocast_dtype: torch.dtype | None,
    world_size: int,
) -> Critic:
    """The PPO critic on ``model_path``'s backbone, with the policy's optimizer settings (one
    replica per rank)."""
    return Critic(
        str(model_path),
        device=device,
        lr=float(optimizer["lr"]),
        betas=tuple(optimizer["betas"]),
        weight_decay=float(optimizer["weight_decay"]),
        grad_clip=grad_clip,
        autocast_dtype=autocast_dtype,
        world_size=world_size,
    )
