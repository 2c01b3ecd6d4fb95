"""The per-rank shard files of an ``actor/`` directory: their names, the sharding rule, reading
them on CPU and merging them back into full tensors. :mod:`rft_core.checkpoint.store` writes and
loads a step through here; :mod:`rft_core.checkpoint.formats.fsdp` streams them to Hugging Face
weights.

    actor/
      model_world_size_<W>_rank_<R>.pt    model weights, rank R's dim-0 shard (see below)
      optim_world_size_<W>_rank_<R>.pt    optimizer state, sharded the same way
      extra_state_world_size_<W>_rank_<R>.pt   lr scheduler, rng states, trainer step, ...
      fsdp_config.json                    {"FSDP_version": 2, "world_size": W}  (also at W=1)

Sharding rule (what FSDP2 keeps per rank): every tensor with at least one dimension is split
with ``torch.chunk(t, W, dim=0)``; rank R holds chunk R, or an empty ``(0, *rest)`` tensor when
``chunk`` returns fewer than W pieces (e.g. 5 rows over 4 ranks: 2, 2, 1, 0 rows). FSDP2 pads
chunks to equal size only inside its communication buffers; its saved local shards are these
unpadded chunks. 0-dim tensors are replicated on every rank. Merging concatenates the rank
files along dim 0 in rank order.

Files written by a real FSDP run may hold ``DTensor`` objects (FSDP2, ``get_model_state_dict``
with sharded options) or ``ShardedTensor`` objects (FSDP1 ``SHARDED_STATE_DICT``) instead of
plain tensors. Both are loaded on CPU without a process group: DTensors are reassembled from
their local tensors and placements (``Shard(d)`` concatenated in mesh order, ``Replicate`` taken
once); ShardedTensors are unpickled into a light stand-in (their own ``__setstate__`` insists on
a process group of the saving rank) and placed into the full tensor by their shard offsets.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from rft_core.checkpoint.layout import FSDP_CONFIG
from rft_core.errors import CheckpointError

MODEL_FILE_RE = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")


def shard_file_name(kind: str, world_size: int, rank: int) -> str:
    """``kind`` is ``model``, ``optim`` or ``extra_state``."""
    return f"{kind}_world_size_{world_size}_rank_{rank}.pt"


# --------------------------------------------------------------------------- sharding


def _own_storage(t: Tensor) -> Tensor:
    """``t`` on CPU with a storage of its own size: torch.save of a view writes the whole
    underlying storage (a flat FSDP buffer, the full tensor of a chunk) into the file."""
    t = t.detach().cpu()
    if t.untyped_storage().nbytes() != t.numel() * t.element_size() or not t.is_contiguous():
        t = t.clone(memory_format=torch.contiguous_format)
    return t


def _shard_tensor(t: Tensor, world_size: int) -> list[Tensor]:
    if t.dim() == 0 or world_size == 1:
        return [_own_storage(t)] * world_size
    out = [_own_storage(c) for c in torch.chunk(t.detach().cpu(), world_size, dim=0)]
    empty = t.new_empty((0, *t.shape[1:]), device="cpu")
    return out + [empty] * (world_size - len(out))


def _shard_value(value: Any, world_size: int) -> list[Any]:
    if isinstance(value, Tensor):
        return _shard_tensor(value, world_size)
    if isinstance(value, dict):
        per_key = {k: _shard_value(v, world_size) for k, v in value.items()}
        return [{k: parts[r] for k, parts in per_key.items()} for r in range(world_size)]
    if isinstance(value, (list, tuple)):
        per_item = [_shard_value(v, world_size) for v in value]
        return [type(value)(parts[r] for parts in per_item) for r in range(world_size)]
    return [value] * world_size


def shard_state_dict(state_dict: dict[str, Any], world_size: int) -> list[dict[str, Any]]:
    """Split a full state dict (or any nest of dicts/lists holding tensors, such as an
    optimizer state dict) into ``world_size`` rank dicts following the module's sharding rule."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    return _shard_value(state_dict, world_size)


class _ShardedTensorStandIn:
    """What a pickled FSDP1 ``ShardedTensor`` unpickles into here: its local shards and
    global metadata, without the real class's check that a process group of the saving rank
    exists."""

    class ProcessGroupState:  # pickled inside ShardedTensor's state; only carried along
        pass

    def __setstate__(self, state: tuple) -> None:
        self.st_local_shards, self.st_metadata = state[0], state[1]


def _dtensor_type() -> type | None:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch built without distributed
        return None
    return DTensor


def _merge_dtensors(parts: list[Any]) -> Tensor:
    """Reassemble a DTensor from every rank's copy: walk the device mesh (1-D FSDP, 2-D HSDP),
    concatenating along ``Shard(d)`` mesh dims and taking index 0 of ``Replicate`` dims.
    Strided shards (FSDP combined with tensor parallelism) and ``Partial`` sums are refused."""
    # optional: torch built without distributed
    from torch.distributed.tensor import Shard

    first = parts[0]
    placements = first.placements
    for placement in placements:
        if not (type(placement) is Shard or placement.is_replicate()):
            raise CheckpointError(
                f"DTensor placement {placement} (mesh {first.device_mesh.mesh_dim_names}) is not "
                "supported: only Shard(d) and Replicate, as FSDP and HSDP save them"
            )
    by_rank = dict(enumerate(parts))  # parts come in global rank order; the mesh holds ranks

    def assemble(mesh_slice: Tensor, dim: int) -> Tensor:
        if dim == len(placements):
            return by_rank[int(mesh_slice.item())]._local_tensor
        placement = placements[dim]
        if placement.is_shard():
            pieces = [assemble(mesh_slice[i], dim + 1) for i in range(mesh_slice.shape[0])]
            return torch.cat(pieces, dim=placement.dim)
        return assemble(mesh_slice[0], dim + 1)

    return assemble(first.device_mesh.mesh, 0)


def _merge_sharded_tensors(parts: list[_ShardedTensorStandIn]) -> Tensor:
    meta = parts[0].st_metadata
    size = tuple(meta.size)
    dtype = meta.tensor_properties.dtype
    full = torch.empty(size, dtype=dtype)
    for part in parts:
        for shard in part.st_local_shards:
            region = full
            for d, (off, n) in enumerate(
                zip(shard.metadata.shard_offsets, shard.metadata.shard_sizes, strict=True)
            ):
                region = region.narrow(d, off, n)
            region.copy_(shard.tensor)
    return full


def _merge_value(parts: list[Any]) -> Any:
    first = parts[0]
    dtensor = _dtensor_type()
    if dtensor is not None and isinstance(first, dtensor):
        return _merge_dtensors(parts)
    if isinstance(first, _ShardedTensorStandIn):
        return _merge_sharded_tensors(parts)
    if isinstance(first, Tensor):
        if first.dim() == 0 or len(parts) == 1:
            return first
        return torch.cat(parts, dim=0)
    if isinstance(first, dict):
        return {k: _merge_value([p[k] for p in parts]) for k in first}
    if isinstance(first, (list, tuple)):
        return type(first)(_merge_value([p[i] for p in parts]) for i in range(len(first)))
    return first


def merge_shards(shards: list[dict[str, Any]], keys: Iterable[str] | None = None) -> dict[str, Any]:
    """Inverse of :func:`shard_state_dict`; also reassembles DTensor / ShardedTensor values.
    ``keys`` restricts (and orders) the merged entries."""
    if not shards:
        raise ValueError("merge_shards needs at least one shard")
    names = list(keys) if keys is not None else list(shards[0])
    return {k: _merge_value([s[k] for s in shards]) for k in names}


def merged_spec(shards: list[dict[str, Any]], key: str) -> tuple[tuple[int, ...], torch.dtype]:
    """Shape and dtype that :func:`merge_one` will return, without assembling the tensor."""
    first = shards[0][key]
    dtensor = _dtensor_type()
    if dtensor is not None and isinstance(first, dtensor):
        return tuple(first.shape), first.dtype
    if isinstance(first, _ShardedTensorStandIn):
        meta = first.st_metadata
        return tuple(meta.size), meta.tensor_properties.dtype
    if not isinstance(first, Tensor):
        raise CheckpointError(
            f"model state entry {key!r} is a {type(first).__name__}, not a tensor"
        )
    if first.dim() == 0 or len(shards) == 1:
        return tuple(first.shape), first.dtype
    rows = sum(s[key].shape[0] for s in shards)
    return (rows, *first.shape[1:]), first.dtype


def merge_pieces(shards: list[dict[str, Any]], key: str) -> list[Tensor]:
    """Tensors whose bytes, concatenated, are the merged tensor's row-major bytes. For this
    module's plain dim-0 shards these are the rank tensors themselves (a dim-0 concatenation
    of row-major tensors is the concatenation of their bytes), so a writer can stream them
    from the memory-mapped files without assembling the tensor."""
    parts = [s[key] for s in shards]
    first = parts[0]
    dtensor = _dtensor_type()
    plain = all(
        isinstance(p, Tensor) and not (dtensor is not None and isinstance(p, dtensor))
        for p in parts
    )
    if plain and first.dim() > 0 and len(parts) > 1:
        return parts
    return [_merge_value(parts)]


def merge_one(shards: list[dict[str, Any]], key: str) -> Any:
    """Merge a single entry; lets a converter stream tensor by tensor."""
    return _merge_value([s[key] for s in shards])


# --------------------------------------------------------------------------- writing


def write_actor_shards(
    actor: Path,
    world_size: int,
    state_dict: dict[str, Tensor],
    optimizer_state: dict | None,
    extra_state: dict | None,
) -> None:
    """The rank files of ``actor`` (model, optimizer and extra state at ``world_size``) and its
    ``fsdp_config.json``."""
    actor.mkdir(parents=True, exist_ok=True)
    for r, shard in enumerate(shard_state_dict(state_dict, world_size)):
        torch.save(shard, actor / shard_file_name("model", world_size, r))
    if optimizer_state is not None:
        for r, shard in enumerate(shard_state_dict(optimizer_state, world_size)):
            torch.save(shard, actor / shard_file_name("optim", world_size, r))
    if extra_state is not None:
        for r in range(world_size):
            torch.save(extra_state, actor / shard_file_name("extra_state", world_size, r))
    cfg = {"FSDP_version": 2, "world_size": world_size}
    (actor / FSDP_CONFIG).write_text(json.dumps(cfg, indent=2) + "\n")


# --------------------------------------------------------------------------- reading


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module.startswith("torch.distributed._shard.sharded_tensor"):
            if name == "ShardedTensor":
                return _ShardedTensorStandIn
            if name == "ShardedTensor.ProcessGroupState":
                return _ShardedTensorStandIn.ProcessGroupState
        if module == "torch._tensor" and name == "_rebuild_from_type_v2":
            return _rebuild_from_type_v2
        return super().find_class(module, name)


def _rebuild_from_type_v2(func: Any, new_type: type, args: tuple, state: Any) -> Any:
    """torch's tensor-subclass rebuild, except that a ShardedTensor becomes its stand-in
    without constructing the wrapper tensor (which needs the real class)."""
    if new_type is _ShardedTensorStandIn:
        holder = _ShardedTensorStandIn()
        holder.__setstate__(state)
        return holder
    return torch._tensor._rebuild_from_type_v2(func, new_type, args, state)


class _PickleModule:
    """``pickle_module`` for torch.load that swaps ShardedTensor for its stand-in."""

    Unpickler = _Unpickler
    load = pickle.load
    __name__ = "rft_pickle"


def _quiet_mesh_unpickle(record: logging.LogRecord) -> bool:
    return "unpickling of the DeviceMesh" not in record.getMessage()


def load_torch_file(path: Path, *, mmap: bool = True) -> Any:
    """torch.load on CPU, memory-mapped. Plain tensors (and DTensors, which torch allow-lists)
    take the safe ``weights_only`` path; other objects written by FSDP itself (ShardedTensor)
    fall back to the full unpickler, as verl's merger does: only point it at checkpoints you
    trust. Raises CheckpointError naming the file when it is missing or unreadable."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint file missing: {path}")
    # unpickling a DeviceMesh without process groups logs a torch.compile warning that does
    # not concern reading weights
    mesh_log = logging.getLogger("torch.distributed.device_mesh")
    mesh_log.addFilter(_quiet_mesh_unpickle)
    try:
        try:
            return torch.load(path, map_location="cpu", mmap=mmap, weights_only=True)
        except pickle.UnpicklingError:
            pass  # not plain tensors: retry below with the full unpickler
        return torch.load(
            path, map_location="cpu", mmap=mmap, weights_only=False, pickle_module=_PickleModule
        )
    except Exception as err:
        raise CheckpointError(f"checkpoint file {path} is corrupt or unreadable ({err})") from err
    finally:
        mesh_log.removeFilter(_quiet_mesh_unpickle)


def world_size_of(actor_dir: Path) -> int:
    """World size from ``fsdp_config.json``, else from the model shard file names."""
    actor_dir = Path(actor_dir)
    cfg = actor_dir / FSDP_CONFIG
    if cfg.is_file():
        try:
            ws = int(json.loads(cfg.read_text())["world_size"])
        except (ValueError, KeyError, TypeError) as err:
            raise CheckpointError(
                f"{cfg} is corrupt: expected a JSON object with 'world_size'"
            ) from err
        return ws
    sizes = {
        int(m.group(1)) for f in os.listdir(actor_dir) if (m := MODEL_FILE_RE.match(f)) is not None
    }
    if not sizes:
        raise CheckpointError(f"no model_world_size_W_rank_R.pt files in {actor_dir}")
    if len(sizes) > 1:
        raise CheckpointError(
            f"{actor_dir} mixes model shards of world sizes {sorted(sizes)} and has no {FSDP_CONFIG} "
            "to say which is current; delete the stale files"
        )
    return sizes.pop()


def load_shard_index(path: Path) -> tuple[dict[str, Tensor], dict[str, tuple[int, int]]] | None:
    """Shapes and byte ranges of a plain-tensor torch.save file without reading tensor data:
    ``(meta-device tensors, key -> (byte offset, nbytes))``, from the record offsets that a
    ``map_location="meta"`` load exposes (contiguous tensors only). None when the file holds
    anything but plain tensors (DTensor, ShardedTensor). CheckpointError when it is missing or
    unreadable."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint file missing: {path}")
    try:
        meta = torch.load(path, map_location="meta", weights_only=True)
    except pickle.UnpicklingError:
        return None
    except Exception as err:
        raise CheckpointError(f"checkpoint file {path} is corrupt or unreadable ({err})") from err
    if not isinstance(meta, dict) or any(type(t) is not Tensor for t in meta.values()):
        return None
    ranges = {}
    for key, t in meta.items():
        base = getattr(t.untyped_storage(), "_checkpoint_offset", None)
        if isinstance(base, int) and t.is_contiguous():
            ranges[key] = (
                base + t.storage_offset() * t.element_size(),
                t.numel() * t.element_size(),
            )
    return meta, ranges


def load_model_shards(actor_dir: Path, world_size: int | None = None) -> list[dict[str, Any]]:
    """Every rank's model file, memory-mapped, in rank order."""
    actor_dir = Path(actor_dir)
    ws = world_size or world_size_of(actor_dir)
    return [load_torch_file(actor_dir / shard_file_name("model", ws, r)) for r in range(ws)]
