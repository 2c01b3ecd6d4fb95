"""A state-dict-only ``actor/model.safetensors`` (or ``model.safetensors.index.json`` with its
shards) in Hugging Face naming: what a user or a non-FSDP trainer drops into ``actor/``.
Tensors are read lazily through ``safe_open`` (memory-mapped)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from rft_core.checkpoint.formats.lazy import LazyStateDict, TensorSpec
from rft_core.checkpoint.layout import SAFETENSORS_FILE, SAFETENSORS_INDEX
from rft_core.dtypes import from_safetensors_code
from rft_core.errors import CheckpointError


def matches(actor_dir: Path) -> bool:
    return (actor_dir / SAFETENSORS_FILE).is_file() or (actor_dir / SAFETENSORS_INDEX).is_file()


def _files(actor_dir: Path) -> list[Path]:
    if (actor_dir / SAFETENSORS_FILE).is_file():
        return [actor_dir / SAFETENSORS_FILE]
    index = actor_dir / SAFETENSORS_INDEX
    try:
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{index} is corrupt: expected a 'weight_map' object") from err
    return [actor_dir / n for n in names]


def open_weights(actor_dir: Path) -> LazyStateDict:
    handles = {}
    specs = {}
    for path in _files(actor_dir):
        if not path.is_file():
            raise CheckpointError(f"checkpoint file missing: {path}")
        try:
            handle = safe_open(str(path), framework="pt")
            for key in handle.keys():
                sl = handle.get_slice(key)
                dtype = getattr(torch, from_safetensors_code(sl.get_dtype()))
                specs[key] = TensorSpec(tuple(sl.get_shape()), dtype)
                handles[key] = handle
        except (SafetensorError, OSError, KeyError) as err:
            raise CheckpointError(
                f"checkpoint file {path} is corrupt or unreadable ({err})"
            ) from err
    return LazyStateDict(
        specs, lambda name: handles[name].get_tensor(name), format_name="safetensors"
    )
