"""fp32 master weights for a policy that computes in bf16 (``model.dtype: auto`` on one CUDA
trainer): the model's parameters are bf16, so every activation, norm and residual add runs in
bf16 with no per-matmul casts, while the optimizer keeps fp32 copies and fp32 moments, so that
updates far below bf16's resolution (lr 1e-6 on weights of 1e-2) still accumulate.

Measured on an H200 (benchmarks/RESULTS.md, run 5): fp32 parameters under bf16 autocast spent a
tenth of the step casting weights and gradients and adding fp32 residuals; bf16 parameters
without the master copy were 11% faster but lose small updates.

- each bf16 gradient is added into its master's fp32 ``.grad`` as soon as backward produces it
  (a post-accumulate hook), and the bf16 one freed: micro-batches accumulate in fp32;
- the optimizer (AdamW, fused on CUDA) steps the masters; ``copy_to_model`` rounds them into
  the model's parameters;
- checkpoints keep each master in the optimizer state (key ``"master"``), so a resumed run
  continues from the fp32 values, not from the rounded weights.
"""

from __future__ import annotations

from typing import Any

import torch

MASTER_KEY = "master"


class MasterWeights:
    """fp32 masters of ``parameters`` (the trainable ones, in order)."""

    def __init__(self, parameters: list[torch.nn.Parameter]) -> None:
        self.params = [p for p in parameters if p.requires_grad]
        self.masters = [torch.nn.Parameter(p.detach().float().clone()) for p in self.params]
        for param, master in zip(self.params, self.masters, strict=True):
            param.register_post_accumulate_grad_hook(_accumulator(master))

    @torch.no_grad()
    def copy_to_model(self) -> None:
        """Round the masters into the model's (bf16) parameters, after an optimizer step."""
        for param, master in zip(self.params, self.masters, strict=True):
            param.copy_(master)

    @torch.no_grad()
    def copy_from_model(self) -> None:
        """Masters from the model's parameters (a checkpoint without masters was loaded)."""
        for param, master in zip(self.params, self.masters, strict=True):
            master.copy_(param)

    def add_to_state(self, optimizer_state: dict[str, Any]) -> dict[str, Any]:
        """``optimizer.state_dict()`` with each master under its parameter's ``"master"``."""
        states = optimizer_state["state"]  # the optimizer's live dicts: copied, not changed
        for index, master in enumerate(self.masters):
            states[index] = {**states.get(index, {}), MASTER_KEY: master.detach()}
        return optimizer_state

    @torch.no_grad()
    def take_from_state(self, optimizer: torch.optim.Optimizer) -> None:
        """After ``optimizer.load_state_dict``: the masters from the loaded state (removed from
        it), or from the model where the checkpoint has none."""
        found = False
        for master in self.masters:
            saved = optimizer.state.get(master, {}).pop(MASTER_KEY, None)
            if saved is not None:
                master.copy_(saved)
                found = True
        if found:
            self.copy_to_model()
        else:
            self.copy_from_model()


def _accumulator(master: torch.nn.Parameter) -> Any:
    def accumulate(param: torch.Tensor) -> None:
        if master.grad is None:
            master.grad = param.grad.float()
        else:
            master.grad.add_(param.grad)
        param.grad = None

    return accumulate
