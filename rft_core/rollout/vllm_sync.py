"""Weight sync into vLLM's workers: the worker extension and the sender's half of each path.

vLLM (V1) runs its model in worker processes behind an engine-core process; ``LLM.collective_rpc``
reaches a method of the ``worker_extension_cls`` mixin on every worker, but its arguments are
msgpack-encoded (``vllm/v1/serial_utils.py``): a tensor in an untyped argument arrives as a list,
which is why the old "send the state dict through collective_rpc" path failed with ``'list'
object has no attribute 'to'`` on vLLM 0.26 (issue 21). Three paths replace it, none of which
copies every tensor through CPU serialization:

- ``in-process``: the engine core and its one worker live in this process
  (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` with ``tensor_parallel_size`` 1: vLLM's in-process client
  and uni-process executor call the worker method directly, no serialization), so the trainer's
  own tensors are handed to ``rft_load_weights`` as they are;
- ``ipc`` (one GPU shared by trainer and engine, vLLM's default multiprocess engine): tensors
  cast to the engine's dtype and packed per ``rft_core.sync.nccl.bucket_plan`` into flat GPU
  buckets (at most ``bucket_bytes`` each, so the extra memory stays one bucket); each bucket
  crosses as a CUDA IPC handle (``torch.multiprocessing.reductions.reduce_tensor``, the handle
  pickled to ``bytes``, which msgpack carries as they are; no ``VLLM_ALLOW_INSECURE_SERIALIZATION``
  needed, unlike vLLM's RLHF colocate example, which sends the handle tuples themselves); the
  worker opens it, unpacks views and calls the model's ``load_weights``. CPU-side tensors (the
  object store's or a checkpoint's) are staged bucket by bucket onto the engine's GPU first;
- ``nccl`` (mode both, separate GPUs): the workers join the trainer's ``BroadcastGroup`` as ranks
  ``1..tp`` and receive its packed buckets, loading each as it arrives (the verl / OpenRLHF /
  Trinity-RFT pattern; ``rft_core.sync.synchronizer`` carries the rendezvous and the metas).

Which path: ``in-process`` whenever the worker is in this process (the user set
``VLLM_ENABLE_V1_MULTIPROCESSING=0``), else ``ipc`` (or ``nccl`` for an nccl sync). Colocate
keeps vLLM's default multiprocess engine rather than forcing the in-process one: the engine
core then schedules and runs the model while this process turns outputs into ``Generation``s,
and ``vllm.LLM.generate`` is measured in that layout (issue 21's figures, the 5 % goal); the
IPC path costs one packing copy per bucket on the GPU, no CPU round trip. A CUDA IPC handle
cannot be opened by the process that made it, which is why the in-process engine gets the
tensors themselves.

Why not vLLM's newer ``weight_transfer`` API: it is not present in every version of the tested
range's neighbours and its shape changed between releases; ``worker_extension_cls`` +
``collective_rpc`` is the API every vLLM since 0.8 keeps. The model's ``load_weights`` takes
Hugging Face names and fuses qkv / gate_up and shards for TP itself.
"""

from __future__ import annotations

import pickle
import time
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch
import torch.multiprocessing as mp
from torch.multiprocessing.reductions import reduce_tensor

from rft_core.sync.nccl import DEFAULT_BUCKET_BYTES, BroadcastGroup, TensorMeta, bucket_plan

# metas cross collective_rpc as plain lists: [name, [dims], "torch.dtype"]
PlainMeta = list


def plain_metas(metas: list[TensorMeta]) -> list[PlainMeta]:
    return [[m.name, list(m.shape), m.dtype] for m in metas]


def from_plain(metas: list[Any]) -> list[TensorMeta]:
    return [m if isinstance(m, TensorMeta) else TensorMeta(m[0], tuple(m[1]), m[2]) for m in metas]


def transfer_metas(
    state_dict: dict[str, torch.Tensor], dtype: torch.dtype | None
) -> list[TensorMeta]:
    """The metas of ``state_dict`` with floating tensors in the engine's ``dtype`` (what is packed
    and sent: an fp32 trainer's weights cross as bf16 for a bf16 engine, half the bytes)."""
    out = []
    for name, t in state_dict.items():
        d = dtype if dtype is not None and t.is_floating_point() else t.dtype
        out.append(TensorMeta(name, tuple(t.shape), str(d)))
    return out


def without_tied(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state_dict`` without the second name of a tensor stored twice (tied embeddings:
    ``lm_head.weight`` is ``model.embed_tokens.weight``; vLLM's model ties them itself and skips
    ``lm_head.`` anyway), so the vocabulary matrix crosses once (a sixth of Qwen2.5-1.5B)."""
    seen: set[tuple] = set()
    out = {}
    for name, t in state_dict.items():
        key = (t.device, t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()))
        if t.data_ptr() != 0 and key in seen:
            continue
        seen.add(key)
        out[name] = t
    return out


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name.removeprefix("torch."))


def pack_bucket(
    state_dict: dict[str, torch.Tensor], bucket: list[TensorMeta], device: torch.device
) -> torch.Tensor:
    """One flat tensor of the bucket's tensors, in order, cast to the bucket's dtype."""
    numel = sum(_numel(m.shape) for m in bucket)
    flat = torch.empty(numel, dtype=_dtype(bucket[0].dtype), device=device)
    offset = 0
    with torch.no_grad():
        for m in bucket:
            n = _numel(m.shape)
            flat[offset : offset + n].copy_(state_dict[m.name].detach().reshape(-1))
            offset += n
    return flat


def unpack_bucket(flat: torch.Tensor, bucket: list[TensorMeta]) -> list[tuple[str, torch.Tensor]]:
    """Views of ``flat`` named and shaped as ``bucket`` says (no copy)."""
    out, offset = [], 0
    for m in bucket:
        n = _numel(m.shape)
        out.append((m.name, flat[offset : offset + n].view(m.shape)))
        offset += n
    return out


def _numel(shape: Any) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def share_handle(tensor: torch.Tensor) -> bytes:
    """A handle to ``tensor``'s memory that another process on the same machine can open, as
    ``bytes``: a CUDA IPC handle for a CUDA tensor; for a CPU tensor (only the fake vLLM of the
    CPU tests meets one) a shared-memory file name. Neither holds the data itself."""

    if not tensor.is_cuda:
        mp.set_sharing_strategy("file_system")  # a file name any process can open
    return bytes(ForkingPickler.dumps(reduce_tensor(tensor)))


def open_handle(handle: bytes) -> torch.Tensor:
    """The tensor behind ``share_handle``'s bytes. A CUDA handle opens on the sender's device
    index: vLLM's default executors (uni-process, multiprocess) start their workers with the
    launching process's ``CUDA_VISIBLE_DEVICES``, so the index names the same GPU on both sides
    (vLLM's Ray executor gives each worker its own visible set; that backend is not used here)."""
    rebuild, args = pickle.loads(handle)
    return rebuild(*args)


class WorkerExtension:
    """Mixed into vLLM's GPU worker (``worker_extension_cls``); its methods run in each worker
    (``self.model_runner.get_model()`` is vLLM's model, ``self.rank`` the worker's rank)."""

    def _rft_model(self) -> Any:
        # get_model() unwraps the CUDA-graph wrapper that ``model_runner.model`` is under
        # vLLM 0.26's full CUDA graphs
        runner = self.model_runner  # type: ignore[attr-defined]
        getter = getattr(runner, "get_model", None)
        return getter() if callable(getter) else runner.model

    def _rft_device(self) -> torch.device:
        return next(self._rft_model().parameters()).device

    def _rft_load(self, named: list[tuple[str, torch.Tensor]]) -> int:
        device = self._rft_device()
        loaded = self._rft_model().load_weights(weights=((n, t.to(device)) for n, t in named))
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the sender may free or reuse its buffer next
        return len(loaded) if loaded is not None else len(named)

    def rft_load_weights(self, named_tensors: list[tuple[str, torch.Tensor]]) -> int:
        """In-process path: the trainer's tensors themselves (any device)."""
        for item in named_tensors[:1]:
            if not isinstance(item[1], torch.Tensor):
                raise TypeError(
                    "rft_load_weights got a serialized tensor (a "
                    f"{type(item[1]).__name__}): it is for an in-process engine only; a "
                    "multiprocess engine loads through rft_load_ipc_bucket"
                )
        return self._rft_load(named_tensors)

    def rft_load_ipc_bucket(self, handle: bytes, metas: list[Any]) -> int:
        """IPC path: open one packed bucket's handle, load its tensors (views, no copy)."""
        flat = open_handle(handle)
        count = self._rft_load(unpack_bucket(flat, from_plain(metas)))
        del flat
        return count

    def rft_join_broadcast(
        self, addr: str, port: int, world_size: int, timeout_s: float = 600.0
    ) -> int:
        """NCCL path: join the trainer's broadcast group as rank ``1 + self.rank`` (the trainer
        is rank 0); once per run. Returns the rank taken."""
        rank = 1 + int(getattr(self, "rank", 0))
        device = self._rft_device()
        self._rft_group = BroadcastGroup(
            addr, int(port), rank, int(world_size), str(device), timeout_s
        )
        return rank

    def rft_receive_broadcast(
        self, metas: list[Any], bucket_bytes: int = DEFAULT_BUCKET_BYTES
    ) -> float:
        """NCCL path: receive the broadcast bucket by bucket, loading each as it lands (at most
        one bucket of extra memory). Returns the seconds it took on this worker."""
        start = time.perf_counter()
        for named in self._rft_group.receive_buckets(from_plain(metas), bucket_bytes):
            self._rft_load(named)
        return time.perf_counter() - start


def send_in_process(llm: Any, state_dict: dict[str, torch.Tensor]) -> int:
    """In-process path: one ``collective_rpc`` with the tensors as they are."""
    named = [(name, t.detach()) for name, t in state_dict.items()]
    return sum(llm.collective_rpc("rft_load_weights", args=(named,)))


def send_ipc(
    llm: Any,
    state_dict: dict[str, torch.Tensor],
    dtype: torch.dtype | None,
    device: torch.device,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
) -> int:
    """IPC path: pack each bucket on ``device`` (the engine's GPU), send its handle; the bucket
    is freed once every worker has loaded it. Returns the number of buckets."""
    state_dict = without_tied(state_dict)
    plan = bucket_plan(transfer_metas(state_dict, dtype), bucket_bytes)
    for bucket in plan:
        flat = pack_bucket(state_dict, bucket, device)
        if flat.is_cuda:
            torch.cuda.synchronize(flat.device)
        llm.collective_rpc("rft_load_ipc_bucket", args=(share_handle(flat), plain_metas(bucket)))
        del flat
    return len(plan)


__all__ = [
    "WorkerExtension",
    "open_handle",
    "pack_bucket",
    "send_in_process",
    "send_ipc",
    "share_handle",
    "transfer_metas",
    "unpack_bucket",
    "without_tied",
]
