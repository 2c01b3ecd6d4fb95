"""Optimizer-state offload for ``colocate`` mode: while the rollout engine generates on the
trainer's GPU, the optimizer's state (AdamW's two moments: twice the parameters' fp32 bytes)
waits in host memory, and comes back before the next step.

Host copies are pinned when CUDA is there, so both directions are asynchronous DMA copies; the
copy back waits for them before the step reads the state. FSDP2-sharded state (DTensors) moves
shard by shard, as ``DTensor.to`` does. Which tensors moved is recorded, so a tensor the
optimizer keeps on the host by design (non-fused AdamW's ``step``) stays there.
"""

from __future__ import annotations

import torch

# (parameter index in the optimizer's state, state key) of each tensor moved to the host
OffloadedKeys = list[tuple[int, str]]


def offload_optimizer_state(optimizer: torch.optim.Optimizer) -> tuple[OffloadedKeys, str]:
    """Move every non-host tensor of ``optimizer.state`` to (pinned, where CUDA is there) host
    memory; returns the moved keys and the device they came from, for ``reload``."""
    moved: OffloadedKeys = []
    source = "cpu"
    pin = torch.cuda.is_available()
    for index, state in enumerate(optimizer.state.values()):
        for key, value in state.items():
            if not torch.is_tensor(value) or (value.device.type == "cpu" and pin):
                continue
            source = str(value.device)
            state[key] = _to_host(value, pin)
            moved.append((index, key))
    if pin:
        torch.cuda.synchronize()  # the device buffers are freed only once the copies are done
    return moved, source


def reload_optimizer_state(
    optimizer: torch.optim.Optimizer, moved: OffloadedKeys, device: str
) -> None:
    """Bring the tensors ``offload_optimizer_state`` moved back to ``device``."""
    states = list(optimizer.state.values())
    for index, key in moved:
        states[index][key] = states[index][key].to(device, non_blocking=True)
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _to_host(value: torch.Tensor, pin: bool) -> torch.Tensor:
    """A host copy of ``value`` (a fresh tensor even on a CPU-only machine, so the round trip
    is exercised there too); pinned when ``pin`` and ``value`` is a plain tensor."""
    if not pin or hasattr(value, "device_mesh"):  # DTensor: moves its local shard
        return value.to("cpu", copy=True)
    host = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
    return host.copy_(value, non_blocking=True)
