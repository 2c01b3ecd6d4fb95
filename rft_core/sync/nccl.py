"""``nccl`` weight sync: the trainer broadcasts its weights to the explorer(s) with
``torch.distributed`` in packed buckets.

A process group of its own (not the default one, which FSDP may hold) is built from a TCP store
hosted by the trainer (rank 0); explorers join as ranks 1..N. The backend is NCCL between CUDA
devices and gloo otherwise, so the same broadcast code runs on a CPU machine. Tensors of one
dtype are concatenated into flat buckets of at most ``bucket_bytes`` so that a model of many
small parameters costs a few collective calls, not one per tensor. Both sides derive the same
bucket plan from the ``(name, shape, dtype)`` list the trainer publishes through the
synchronizer actor.
"""

from __future__ import annotations

import datetime
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist

from rft_core.errors import ServiceUnavailable

DEFAULT_BUCKET_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class TensorMeta:
    name: str
    shape: tuple[int, ...]
    dtype: str  # str(torch.dtype) so it crosses Ray as plain data


def tensor_metas(state_dict: dict[str, torch.Tensor]) -> list[TensorMeta]:
    return [TensorMeta(k, tuple(v.shape), str(v.dtype)) for k, v in state_dict.items()]


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name.removeprefix("torch."))


def bucket_plan(
    metas: list[TensorMeta], bucket_bytes: int = DEFAULT_BUCKET_BYTES
) -> list[list[TensorMeta]]:
    """Consecutive tensors of one dtype grouped into buckets of at most ``bucket_bytes`` (a
    tensor larger than the limit gets a bucket of its own)."""
    buckets: list[list[TensorMeta]] = []
    size = 0
    for meta in metas:
        nbytes = _numel(meta.shape) * _dtype(meta.dtype).itemsize
        if not buckets or buckets[-1][0].dtype != meta.dtype or size + nbytes > bucket_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append(meta)
        size += nbytes
    return buckets


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class BroadcastGroup:
    """One side of the trainer→explorer broadcast group. Rank 0 is the trainer (sender)."""

    def __init__(
        self,
        master_addr: str,
        master_port: int,
        rank: int,
        world_size: int,
        device: str = "cpu",
        timeout_s: float = 600.0,
    ):
        self.rank = rank
        self.device = torch.device(device)
        timeout = datetime.timedelta(seconds=timeout_s)
        try:
            store = dist.TCPStore(
                master_addr,
                master_port,
                world_size,
                is_master=rank == 0,
                timeout=timeout,
                wait_for_workers=False,
            )
        except (RuntimeError, OSError) as err:  # DistStoreError subclasses RuntimeError
            raise ServiceUnavailable(
                f"nccl weight sync: cannot reach the trainer's TCP store at {master_addr}:{master_port} "
                f"within synchronizer.sync_timeout={timeout_s:g}s ({err}); check that the explorer "
                "and trainer nodes can reach each other, or use synchronizer.sync_method: checkpoint"
            ) from err
        store = dist.PrefixStore("rft_weight_sync", store)
        if self.device.type == "cuda" and dist.is_nccl_available():
            self.backend = "nccl"
            self.group = dist.ProcessGroupNCCL(store, rank, world_size)
        else:
            self.backend = "gloo"
            self.group = dist.ProcessGroupGloo(store, rank, world_size, timeout)

    def _broadcast(self, tensor: torch.Tensor) -> None:
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        self.group.broadcast([tensor], opts).wait()

    def send(
        self,
        state_dict: dict[str, torch.Tensor],
        metas: list[TensorMeta],
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    ) -> int:
        """Broadcast ``state_dict`` (rank 0). Returns the number of buckets sent."""
        plan = bucket_plan(metas, bucket_bytes)
        for bucket in plan:
            flat = torch.cat([state_dict[m.name].detach().reshape(-1) for m in bucket]).to(
                self.device
            )
            self._broadcast(flat)
        return len(plan)

    def receive(
        self, metas: list[TensorMeta], bucket_bytes: int = DEFAULT_BUCKET_BYTES
    ) -> dict[str, torch.Tensor]:
        """Receive the broadcast (ranks > 0) into new tensors shaped as ``metas`` say."""
        out: dict[str, torch.Tensor] = {}
        for named in self.receive_buckets(metas, bucket_bytes):
            out.update(named)
        return out

    def receive_buckets(
        self, metas: list[TensorMeta], bucket_bytes: int = DEFAULT_BUCKET_BYTES
    ) -> Iterator[list[tuple[str, torch.Tensor]]]:
        """Receive the broadcast one bucket at a time: ``(name, view)`` pairs of each bucket's
        flat buffer, so a receiver that loads them before the next bucket holds one at most."""
        for bucket in bucket_plan(metas, bucket_bytes):
            numel = sum(_numel(m.shape) for m in bucket)
            flat = torch.empty(numel, dtype=_dtype(bucket[0].dtype), device=self.device)
            self._broadcast(flat)
            named, offset = [], 0
            for m in bucket:
                n = _numel(m.shape)
                named.append((m.name, flat[offset : offset + n].view(m.shape)))
                offset += n
            yield named
