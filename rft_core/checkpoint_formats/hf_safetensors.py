"""Hugging Face weight files: ``model.safetensors``, or ``model-0000k-of-0000n.safetensors``
plus ``model.safetensors.index.json`` above a size limit, as ``save_pretrained`` lays them out.
The trainer's checkpoints and ``trinity convert`` both write through :func:`write_hf_weights`,
so there is one writer of this layout. ``safetensors.torch.save_file`` does the writing.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from safetensors.torch import save_file
from torch import Tensor

SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
# hidden dir beside huggingface/ where weights are written before being moved in
WEIGHTS_TMP_INFIX = ".weights-tmp-"
# Hugging Face's long-standing default shard limit for save_pretrained.
DEFAULT_MAX_SHARD_BYTES = 5 * 1024**3


def _nbytes(state_dict: Mapping[str, Tensor], name: str) -> int:
    # lazy state dicts (rft_core.checkpoint_formats) know sizes without loading the tensor
    if hasattr(state_dict, "nbytes"):
        return state_dict.nbytes(name)
    t = state_dict[name]
    return t.numel() * t.element_size()


def _plan_shards(state_dict: Mapping[str, Tensor], max_shard_bytes: int) -> list[list[str]]:
    groups: list[list[str]] = [[]]
    size = 0
    for name in state_dict:
        n = _nbytes(state_dict, name)
        if groups[-1] and size + n > max_shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += n
    return groups


def drop_tied_weights(state_dict: Mapping[str, Tensor], hf_config: Any) -> Mapping[str, Tensor]:
    """Hugging Face stores tied output embeddings once; safetensors refuses shared storage."""
    if getattr(hf_config, "tie_word_embeddings", False) and "lm_head.weight" in state_dict:
        if hasattr(state_dict, "without"):
            return state_dict.without({"lm_head.weight"})
        return {k: v for k, v in state_dict.items() if k != "lm_head.weight"}
    return state_dict


def write_hf_weights(
    out_dir: Path,
    state_dict: Mapping[str, Tensor],
    *,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    tmp_dir: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[str]:
    """Write ``model.safetensors`` (or ``model-0000k-of-0000n.safetensors`` + index above
    ``max_shard_bytes``) into ``out_dir``. ``state_dict`` may be lazy: tensors are fetched one
    output file at a time, so memory holds one file's tensors at most. Files are written in
    ``tmp_dir`` (default: a hidden dir beside out_dir) and moved in with ``os.replace``; the
    single file or the index, which is what readers look for, moves last, after any marker of
    an earlier layout is removed. ``progress(done, total)`` counts fetched tensors. Returns
    the file names written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    own_tmp = tmp_dir is None
    tmp = (
        Path(tmp_dir)
        if tmp_dir
        else out_dir.parent / f".{out_dir.name}{WEIGHTS_TMP_INFIX}{os.getpid()}"
    )
    tmp.mkdir(parents=True, exist_ok=True)
    groups = _plan_shards(state_dict, max_shard_bytes)
    total_tensors = sum(len(g) for g in groups)
    done = 0
    meta = {"format": "pt"}

    def fetch(group: list[str]) -> dict[str, Tensor]:
        nonlocal done
        out = {}
        for name in group:
            out[name] = state_dict[name].contiguous()
            done += 1
            if progress is not None:
                progress(done, total_tensors)
        return out

    try:
        if len(groups) == 1:
            names = [SAFETENSORS_FILE]
            save_file(fetch(groups[0]), str(tmp / SAFETENSORS_FILE), metadata=meta)
        else:
            n = len(groups)
            names = [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
            weight_map = {}
            for fname, group in zip(names, groups, strict=True):
                save_file(fetch(group), str(tmp / fname), metadata=meta)
                weight_map.update(dict.fromkeys(group, fname))
            total = sum(_nbytes(state_dict, k) for k in state_dict)
            index = {"metadata": {"total_size": total}, "weight_map": weight_map}
            (tmp / SAFETENSORS_INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
            names = [*names, SAFETENSORS_INDEX]
        # remove the completion marker of any earlier layout before moving new files in
        for stale in (SAFETENSORS_INDEX, SAFETENSORS_FILE):
            if (out_dir / stale).exists():
                (out_dir / stale).unlink()
        for fname in names:  # names end with the completion marker
            os.replace(tmp / fname, out_dir / fname)
        for f in out_dir.glob("model*.safetensors"):
            if f.name not in names:
                f.unlink()
    finally:
        if own_tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return names


def hf_weights_complete(hf_dir: Path) -> bool:
    """True when ``hf_dir`` holds finished weights: ``model.safetensors``, or an index whose
    every shard file exists. Reads no tensor data."""
    hf_dir = Path(hf_dir)
    if (hf_dir / SAFETENSORS_FILE).is_file():
        return True
    index = hf_dir / SAFETENSORS_INDEX
    if not index.is_file():
        return False
    try:
        files = set(json.loads(index.read_text())["weight_map"].values())
    except (ValueError, KeyError, TypeError):
        return False
    return all((hf_dir / f).is_file() for f in files)
