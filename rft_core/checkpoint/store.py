"""Save and load of one step of a job's tree: a full checkpoint (model, optimizer, extra state,
config and tokenizer, optionally Hugging Face weights), the weights-only dirs of
checkpoint-based weight sync, and the merged weights or the whole state back. The trainer, the
synchronizer and the explorer write and read steps here; the tree's names and its small files
are :mod:`rft_core.checkpoint.layout`'s, the rank files :mod:`rft_core.checkpoint.shards`'s.

Writes are atomic: a step is built in a hidden temporary directory beside its final place and
renamed into place; the ``latest_*`` files are replaced atomically afterwards.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from transformers import GenerationConfig

from rft_core.checkpoint.formats.hf_safetensors import drop_tied_weights, write_hf_weights
from rft_core.checkpoint.layout import (
    FULL_CHECKPOINT_MARKER,
    actor_dir,
    hf_dir,
    is_full_checkpoint,
    latest_checkpoint_step,
    mark_latest_checkpoint,
    mark_latest_state_dict,
    move_dir_into_place,
    prune_sync_dirs,
    step_dir,
)
from rft_core.checkpoint.shards import (
    load_model_shards,
    load_torch_file,
    merge_shards,
    shard_file_name,
    world_size_of,
    write_actor_shards,
)
from rft_core.errors import CheckpointError


@dataclass
class LoadedCheckpoint:
    step: int
    state_dict: dict[str, Tensor]
    optimizer_state: dict | None
    extra_state: dict
    path: Path


def rng_state() -> dict[str, Any]:
    """The torch, python, numpy and cuda RNG states a checkpoint carries in its extra state."""
    state: dict[str, Any] = {"cpu": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    state["numpy"] = np.random.get_state()
    return state


def restore_rng_state(rng: dict[str, Any]) -> None:
    """Inverse of :func:`rng_state` (for the states ``rng`` holds)."""
    if "cpu" in rng:
        torch.set_rng_state(rng["cpu"])
    if "python" in rng:
        random.setstate(rng["python"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state(rng["cuda"])
    if "numpy" in rng:
        np.random.set_state(rng["numpy"])


# tokenizer files a model directory may carry that a fast tokenizer's save_pretrained does not
# write again (transformers 5 writes tokenizer.json, tokenizer_config.json, chat_template.jinja)
TOKENIZER_FILES = (
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "special_tokens_map.json",
    "tokenizer.model",
)


def _copy_tokenizer_files(source: Path | None, hf: Path) -> None:
    """The base model's own tokenizer files beside the saved ones, as the seed's tree shows
    them (``vocab.json``, ``merges.txt``, ... for Qwen2.5), when it has them."""
    if source is None:
        return
    for name in TOKENIZER_FILES:
        if (Path(source) / name).is_file() and not (hf / name).exists():
            shutil.copy2(Path(source) / name, hf / name)


def save_checkpoint(
    job_dir: Path,
    step: int,
    *,
    state_dict: dict[str, Tensor],
    optimizer_state: dict | None,
    extra_state: dict,
    hf_config: Any,
    tokenizer: Any,
    generation_config: Any = None,
    save_hf: bool,
    world_size: int = 1,
    tokenizer_source: Path | None = None,
) -> Path:
    """Write a full checkpoint ``job_dir/global_step_<step>/`` atomically and point the
    ``latest_*`` files at it. ``extra_state`` gains ``global_step`` and ``rng`` (torch, python,
    numpy, cuda states) unless given. ``tokenizer_source``: the model directory whose tokenizer
    files are copied in beside the saved ones. Returns the step directory."""
    job_dir = Path(job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    final = step_dir(job_dir, step)
    tmp = job_dir / f".global_step_{step}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        actor = actor_dir(tmp)
        extra = {"global_step": step, "rng": rng_state(), **(extra_state or {})}
        write_actor_shards(actor, world_size, state_dict, optimizer_state, extra)
        hf = hf_dir(tmp)
        hf.mkdir()
        hf_config.save_pretrained(hf)
        if generation_config is None:
            generation_config = GenerationConfig.from_model_config(hf_config)
        generation_config.save_pretrained(hf)
        if tokenizer is not None:
            tokenizer.save_pretrained(hf)
        _copy_tokenizer_files(tokenizer_source, hf)
        if save_hf:
            weights = {k: v.detach().cpu() for k, v in state_dict.items()}
            write_hf_weights(hf, drop_tied_weights(weights, hf_config), tmp_dir=tmp / ".weights")
            shutil.rmtree(tmp / ".weights", ignore_errors=True)
        (tmp / FULL_CHECKPOINT_MARKER).write_text(f"{step}\n")
        move_dir_into_place(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    mark_latest_checkpoint(job_dir, step)
    return final


def add_hf_weights(
    job_dir: Path, step: int, state_dict: dict[str, Tensor], hf_config: Any
) -> list[str]:
    """Write the Hugging Face weights into the existing full checkpoint of ``step`` (its last
    interval checkpoint is also the final one): the shards are not written a second time."""
    hf = hf_dir(step_dir(Path(job_dir), step))
    if not (hf / "config.json").is_file():
        raise CheckpointError(f"{hf}: no checkpoint of step {step} to add Hugging Face weights to")
    weights = {k: v.detach().cpu() for k, v in state_dict.items()}
    return write_hf_weights(hf, drop_tied_weights(weights, hf_config))


def save_state_dict_for_sync(job_dir: Path, step: int, state_dict: dict[str, Tensor]) -> Path:
    """Write only the model weights (world size 1) for checkpoint-based weight sync and point
    ``latest_state_dict_iteration.txt`` at them. An existing full checkpoint of the same step
    already holds the weights and is left as it is. Older sync-only dirs are removed, keeping
    the newest ``layout.SYNC_DIRS_TO_KEEP``; full checkpoints are never touched."""
    job_dir = Path(job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    final = step_dir(job_dir, step)
    if not is_full_checkpoint(final):
        tmp = job_dir / f".global_step_{step}.sync-tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            write_actor_shards(actor_dir(tmp), 1, state_dict, None, None)
            move_dir_into_place(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    mark_latest_state_dict(job_dir, step)
    prune_sync_dirs(job_dir)
    return final


def load_state_dict(actor_path: Path) -> dict[str, Tensor]:
    """Merged full model weights of one ``actor/`` directory (any world size)."""
    return merge_shards(load_model_shards(actor_path))


def load_step_weights(job_dir: Path, step: int) -> dict[str, Tensor]:
    """Merged full model weights of ``global_step_<step>`` (a full checkpoint or a sync dir)."""
    return load_state_dict(actor_dir(step_dir(Path(job_dir), step)))


def load_checkpoint(job_dir: Path, step: int | None = None) -> LoadedCheckpoint:
    """Load ``global_step_<step>`` (default: the latest full checkpoint) with merged tensors."""
    job_dir = Path(job_dir)
    if step is None:
        step = latest_checkpoint_step(job_dir)
        if step is None:
            raise CheckpointError(
                f"no full checkpoint (global_step_N with {FULL_CHECKPOINT_MARKER}) in {job_dir}"
            )
    actor = actor_dir(step_dir(job_dir, step))
    if not actor.is_dir():
        raise CheckpointError(f"checkpoint directory missing: {actor}")
    ws = world_size_of(actor)
    state_dict = merge_shards(load_model_shards(actor, ws))
    optim_files = [actor / shard_file_name("optim", ws, r) for r in range(ws)]
    optimizer_state = None
    if any(f.exists() for f in optim_files):
        optimizer_state = merge_shards([load_torch_file(f, mmap=False) for f in optim_files])
    extra_file = actor / shard_file_name("extra_state", ws, 0)
    extra_state = load_torch_file(extra_file, mmap=False) if extra_file.exists() else {}
    return LoadedCheckpoint(step, state_dict, optimizer_state, extra_state, step_dir(job_dir, step))
