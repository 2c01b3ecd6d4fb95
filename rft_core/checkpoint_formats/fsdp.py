"""FSDP-style shards ``model_world_size_W_rank_R.pt``: ours (plain tensors, dim-0 chunks, see
:mod:`rft_core.trainer.checkpoint`), verl/Trinity FSDP2 (``DTensor``) and FSDP1
(``ShardedTensor``). The world size comes from ``fsdp_config.json``, else from the file names.
Parameter names are Hugging Face names; wrapper prefixes (``module.``, ``_orig_mod.``,
``_fsdp_wrapped_module.``, ``_checkpoint_wrapped_module.``) are stripped."""

from __future__ import annotations

import os
from pathlib import Path

from rft_core.checkpoint_formats import LazyStateDict, TensorSpec
from rft_core.trainer.checkpoint import (
    MODEL_FILE_RE,
    load_model_shards,
    merge_one,
    merged_spec,
    world_size_of,
)

WRAPPER_PARTS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def matches(actor_dir: Path) -> bool:
    return any(MODEL_FILE_RE.match(f) for f in os.listdir(actor_dir))


def hf_name(name: str) -> str:
    for part in WRAPPER_PARTS:
        name = name.replace(part, "")
    return name.removeprefix("module.")


def open_weights(actor_dir: Path) -> LazyStateDict:
    shards = load_model_shards(actor_dir, world_size_of(actor_dir))
    source = {hf_name(k): k for k in shards[0]}
    specs = {}
    for name, key in source.items():
        shape, dtype = merged_spec(shards, key)
        specs[name] = TensorSpec(shape, dtype)
    return LazyStateDict(specs, lambda name: merge_one(shards, source[name]), format_name="fsdp")
