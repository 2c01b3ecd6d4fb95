"""Readers of the actor weight layouts that ``trinity convert`` accepts, behind one lazy view.

Each reader maps an ``actor/`` directory to a :class:`LazyStateDict` in Hugging Face naming:
shapes and dtypes are known up front (to plan output files and check them against the model
architecture) and a tensor is only assembled when asked for, so conversion streams one output
file at a time. Detection order, first match wins:

1. ``fsdp``: ``model_world_size_W_rank_R.pt`` (ours, verl FSDP1/FSDP2) -> :mod:`.fsdp`
2. ``megatron``: ``mp_rank_XX[_YYY]/model_optim_rng.pt`` -> :mod:`.megatron`
3. ``safetensors``: a state-dict-only ``actor/model.safetensors`` (+ index) -> :mod:`.state_dict`
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from rft_core.checkpoint.formats import fsdp, megatron, state_dict
from rft_core.checkpoint.formats.lazy import LazyStateDict
from rft_core.errors import ConvertError


def detect_format(actor_dir: Path) -> str | None:
    """``fsdp``, ``megatron``, ``safetensors``, or None when no supported weights are there."""
    for name, module in (("fsdp", fsdp), ("megatron", megatron), ("safetensors", state_dict)):
        if module.matches(actor_dir):
            return name
    return None


def open_actor_weights(actor_dir: Path, hf_config: Any) -> LazyStateDict:
    """The actor's weights in Hugging Face naming, whatever layout they were saved in."""
    actor_dir = Path(actor_dir)
    fmt = detect_format(actor_dir)
    if fmt == "fsdp":
        return fsdp.open_weights(actor_dir)
    if fmt == "megatron":
        return megatron.open_weights(actor_dir, hf_config)
    if fmt == "safetensors":
        return state_dict.open_weights(actor_dir)
    hint = ""
    if (actor_dir / "dist_ckpt").is_dir():
        hint = (
            " It holds a Megatron torch_dist checkpoint (dist_ckpt/), which this converter does "
            "not read; save with the legacy per-rank layout (mp_rank_XX/model_optim_rng.pt)."
        )
    raise ConvertError(
        f"no model weights found in {actor_dir}: expected model_world_size_W_rank_R.pt shards, "
        f"Megatron mp_rank_XX/ directories or a model.safetensors state dict.{hint}"
    )


def check_against_architecture(weights: LazyStateDict, hf_config: Any, where: Path) -> None:
    """Compare names and shapes with the model that ``hf_config`` describes (built on the meta
    device: no memory, no time). Raises ConvertError listing what does not match. Models
    transformers cannot build from the config alone are not checked."""
    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_config)
    except Exception:  # remote-code or non-causal-LM architectures: nothing to compare with
        return
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if getattr(hf_config, "tie_word_embeddings", False):
        expected.pop("lm_head.weight", None)
    got = {k: s.shape for k, s in weights.specs.items()}
    if getattr(hf_config, "tie_word_embeddings", False):
        got.pop("lm_head.weight", None)
    missing = sorted(set(expected) - set(got))
    unexpected = sorted(set(got) - set(expected))
    wrong = sorted(k for k in set(expected) & set(got) if expected[k] != got[k])
    problems = []
    if missing:
        problems.append(f"missing {_few(missing)}")
    if unexpected:
        problems.append(f"unexpected {_few(unexpected)}")
    if wrong:
        problems.append(
            "shape mismatch "
            + ", ".join(f"{k} {list(got[k])} vs config {list(expected[k])}" for k in wrong[:3])
        )
    if problems:
        raise ConvertError(
            f"weights in {where} ({weights.format_name}) do not match the architecture in "
            f"config.json ({getattr(hf_config, 'model_type', '?')}): "
            + "; ".join(problems)
            + ". Is --base-model-dir the model this run started from?"
        )


def _few(names: list[str]) -> str:
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return ", ".join(names[:3]) + more
