"""FSDP-style shards ``model_world_size_W_rank_R.pt``: ours (plain tensors, dim-0 chunks, see
:mod:`rft_core.checkpoint.shards`), verl/Trinity FSDP2 (``DTensor``) and FSDP1
(``ShardedTensor``). The world size comes from ``fsdp_config.json``, else from the file names.
Parameter names are Hugging Face names; wrapper prefixes (``module.``, ``_orig_mod.``,
``_fsdp_wrapped_module.``, ``_checkpoint_wrapped_module.``) are stripped."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from rft_core.checkpoint.formats.hf_safetensors import FileRange
from rft_core.checkpoint.formats.lazy import LazyStateDict, TensorSpec
from rft_core.checkpoint.shards import (
    MODEL_FILE_RE,
    load_model_shards,
    load_shard_index,
    merge_one,
    merge_pieces,
    merged_spec,
    shard_file_name,
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
    world_size = world_size_of(actor_dir)
    files = [actor_dir / shard_file_name("model", world_size, r) for r in range(world_size)]
    indexes = [load_shard_index(f) for f in files]
    plain = all(ix is not None for ix in indexes)

    @functools.cache
    def shards() -> list[dict]:  # memory-mapped tensors, loaded only when bytes are needed
        return load_model_shards(actor_dir, world_size)

    described = [ix[0] for ix in indexes] if plain else shards()
    ranges = [ix[1] for ix in indexes] if plain else [{} for _ in files]
    source = {hf_name(k): k for k in described[0]}
    specs = {}
    for name, key in source.items():
        shape, dtype = merged_spec(described, key)
        specs[name] = TensorSpec(shape, dtype)

    def file_ranges(name: str) -> list[FileRange] | None:
        # plain dim-0 shards: the merged bytes are the rank records' bytes, in rank order
        key = source[name]
        if not all(key in r for r in ranges) or (world_size > 1 and not specs[name].shape):
            return None  # DTensor / ShardedTensor entries, replicated 0-dim tensors
        return [FileRange(f, *r[key]) for f, r in zip(files, ranges, strict=True)]

    return LazyStateDict(
        specs,
        lambda name: merge_one(shards(), source[name]),
        format_name="fsdp",
        pieces=lambda name: merge_pieces(shards(), source[name]),
        file_ranges=file_ranges,
    )
