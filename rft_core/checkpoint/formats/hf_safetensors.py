"""Hugging Face weight files: ``model.safetensors``, or ``model-0000k-of-0000n.safetensors``
plus ``model.safetensors.index.json`` above a size limit, as ``save_pretrained`` lays them out.
The trainer's checkpoints and ``trinity convert`` both write through :func:`write_hf_weights`,
so there is one writer of this layout.

The file format (8-byte little-endian header length, JSON header of dtype/shape/data_offsets,
raw row-major bytes) is written here rather than by ``safetensors.torch.save_file``: that
function needs every tensor of a file materialised first, i.e. the merged copy of every
sharded tensor, and then copies each into its own buffer. Streaming instead writes each
rank's shard bytes straight from the checkpoint (a dim-0 concatenation of row-major tensors is
the concatenation of their bytes): with ``os.copy_file_range`` from the shard file when no
dtype cast is needed (an in-kernel copy, as ``cp`` does), else from the memory-mapped tensor,
so conversion runs near ``cp`` speed (benchmarks/convert.py). Files are read back with the safetensors library in the tests.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from rft_core.checkpoint.layout import SAFETENSORS_FILE, SAFETENSORS_INDEX
from rft_core.dtypes import SAFETENSORS_CODES

# hidden dir beside huggingface/ where weights are written before being moved in
WEIGHTS_TMP_INFIX = ".weights-tmp-"
# Hugging Face's long-standing default shard limit for save_pretrained.
DEFAULT_MAX_SHARD_BYTES = 5 * 1024**3


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_dead_temp_dirs(out_dir: Path) -> None:
    """Delete the temporary dirs beside ``out_dir`` that :func:`write_hf_weights` of a process
    no longer alive left (a killed conversion); those of live processes are kept."""
    out_dir = Path(out_dir)
    prefix = f".{out_dir.name}{WEIGHTS_TMP_INFIX}"
    if not out_dir.parent.is_dir():
        return
    for entry in out_dir.parent.iterdir():
        if entry.name.startswith(prefix):
            pid = entry.name[len(prefix) :]
            if not pid.isdigit() or int(pid) == os.getpid() or not _pid_alive(int(pid)):
                shutil.rmtree(entry, ignore_errors=True)


@dataclass(frozen=True)
class FileRange:
    """``nbytes`` raw tensor bytes at ``offset`` in ``path`` (an uncompressed torch.save record)."""

    path: Path
    offset: int
    nbytes: int

    def read_into(self, out: memoryview) -> None:
        """Fill ``out[:nbytes]`` with the range's bytes (plain reads: no page faults of a
        fresh mapping, which cost more than the copy on a busy machine)."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            done = 0
            while done < self.nbytes:
                n = os.preadv(fd, [out[done : self.nbytes]], self.offset + done)
                if n == 0:
                    raise OSError(f"{self.path} ended before byte {self.offset + self.nbytes}")
                done += n
        finally:
            os.close(fd)


def _spec(state_dict: Mapping[str, Tensor], name: str) -> tuple[tuple[int, ...], torch.dtype]:
    # lazy state dicts (rft_core.checkpoint.formats) know shapes without loading the tensor
    if hasattr(state_dict, "out_spec"):
        return state_dict.out_spec(name)
    t = state_dict[name]
    return tuple(t.shape), t.dtype


def _pieces(state_dict: Mapping[str, Tensor], name: str) -> Iterable[Tensor | FileRange]:
    """Tensors whose bytes, concatenated, are the tensor's row-major bytes."""
    if hasattr(state_dict, "pieces"):
        return state_dict.pieces(name)
    return [state_dict[name]]


def _write_all(fd: int, view: memoryview | bytes) -> int:
    view = memoryview(view)
    done = 0
    while done < len(view):  # one write(2) moves at most ~2 GB
        done += os.write(fd, view[done:])
    return done


def _write_tensor(fd: int, t: Tensor) -> int:
    t = t.detach().cpu().contiguous().reshape(-1)
    return _write_all(fd, t.view(torch.uint8).numpy().data) if t.numel() else 0


def _copy_range(fd: int, piece: FileRange) -> int:
    src = os.open(piece.path, os.O_RDONLY)
    try:
        done = 0
        while done < piece.nbytes:
            try:
                n = os.copy_file_range(src, fd, piece.nbytes - done, piece.offset + done)
            except OSError:  # filesystems or kernels without it: plain reads
                n = os.write(
                    fd, os.pread(src, min(piece.nbytes - done, 64 << 20), piece.offset + done)
                )
            if n == 0:
                raise OSError(f"{piece.path} ended before byte {piece.offset + piece.nbytes}")
            done += n
        return done
    finally:
        os.close(src)


def write_safetensors(
    path: Path,
    state_dict: Mapping[str, Tensor],
    names: list[str],
    metadata: dict[str, str] | None = None,
    on_tensor: Callable[[], None] | None = None,
) -> None:
    """Stream ``names`` of ``state_dict`` into one safetensors file at ``path``."""
    header: dict[str, Any] = {}
    offset = 0
    for name in names:
        shape, dtype = _spec(state_dict, name)
        n = _nbytes(state_dict, name)
        header[name] = {
            "dtype": SAFETENSORS_CODES[str(dtype).removeprefix("torch.")],
            "shape": list(shape),
            "data_offsets": [offset, offset + n],
        }
        offset += n
    if metadata:
        header["__metadata__"] = metadata
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # data starts 8-byte aligned, as the library writes it
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, struct.pack("<Q", len(blob)) + blob)
        for name in names:
            begin, end = header[name]["data_offsets"]
            written = 0
            for piece in _pieces(state_dict, name):
                if isinstance(piece, FileRange):
                    written += _copy_range(fd, piece)
                else:
                    written += _write_tensor(fd, piece)
            if written != end - begin:  # a reader bug, not a user error
                raise RuntimeError(f"{name}: wrote {written} bytes, header says {end - begin}")
            if on_tensor is not None:
                on_tensor()
    finally:
        os.close(fd)


def _nbytes(state_dict: Mapping[str, Tensor], name: str) -> int:
    shape, dtype = _spec(state_dict, name)
    return torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()


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
    at a time while they are written, so memory holds one tensor at most. Files are written in
    ``tmp_dir`` (default: a hidden dir beside out_dir) and moved in with ``os.replace``; the
    single file or the index, which is what readers look for, moves last, after any marker of
    an earlier layout is removed. ``progress(done, total)`` counts written tensors. Returns
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

    def on_tensor() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total_tensors)

    try:
        if len(groups) == 1:
            names = [SAFETENSORS_FILE]
            write_safetensors(tmp / SAFETENSORS_FILE, state_dict, groups[0], meta, on_tensor)
        else:
            n = len(groups)
            names = [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
            weight_map = {}
            for fname, group in zip(names, groups, strict=True):
                write_safetensors(tmp / fname, state_dict, group, meta, on_tensor)
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
