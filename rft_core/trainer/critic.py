"""The PPO critic: the policy's backbone with a scalar value head, trained with the clipped
value loss (``rft_core.algorithms.policy_losses.value_loss``).

The value of response token t is read from the hidden state that predicts it (the position
before it), as verl does: the same ``logits_to_keep``-style tail slice as the actor.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from transformers import AutoModel

from rft_core.algorithms.policy_losses import value_loss
from rft_core.trainer.batching import MicroBatch


class Critic(nn.Module):
    def __init__(
        self,
        model_path: str,
        *,
        device: torch.device,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        weight_decay: float = 0.01,
        grad_clip: float = 1.0,
        cliprange_value: float = 0.5,
        autocast_dtype: torch.dtype | None = None,
        world_size: int = 1,
    ) -> None:
        super().__init__()
        self.backbone = AutoModel.from_pretrained(model_path, dtype=torch.float32)
        hidden = self.backbone.config.hidden_size
        self.value_head = nn.Linear(hidden, 1)
        nn.init.normal_(self.value_head.weight, std=1.0 / (hidden + 1))
        nn.init.zeros_(self.value_head.bias)
        self.to(device)
        self.device = device
        self.grad_clip = grad_clip
        self.cliprange_value = cliprange_value
        self.autocast_dtype = autocast_dtype
        # trainer ranks keep a replica each; gradients are averaged over them (as DDP does)
        self.world_size = world_size
        self.optimizer = torch.optim.AdamW(
            self.parameters(),
            lr=lr,
            betas=betas,
            weight_decay=weight_decay,
            fused=device.type == "cuda",  # one kernel per step, as the policy's
        )

    def values(self, mb: MicroBatch) -> torch.Tensor:
        """[B, R] value of the state before each response token."""
        with torch.autocast(
            self.device.type,
            dtype=self.autocast_dtype or torch.bfloat16,
            enabled=self.autocast_dtype is not None,
        ):
            hidden = self.backbone(
                input_ids=mb.input_ids,
                attention_mask=mb.attention_mask,
                position_ids=mb.position_ids,
                use_cache=False,
            ).last_hidden_state
        tail = hidden[:, -(mb.response_width + 1) : -1]
        return self.value_head(tail.float()).squeeze(-1)

    def update(
        self,
        micro_batches: list[MicroBatch],
        old_values: list[torch.Tensor],
        returns: list[torch.Tensor],
        weights: list[float],
        loss_agg_mode: str,
        horizon: int,
    ) -> dict[str, float]:
        """One optimizer step of the critic over the micro-batches (gradient accumulation)."""
        self.train()
        self.optimizer.zero_grad(set_to_none=True)
        totals = {"critic/vf_loss": 0.0, "critic/vf_clipfrac": 0.0}
        for mb, old, ret, weight in zip(micro_batches, old_values, returns, weights, strict=True):
            values = self.values(mb)
            loss, metrics = value_loss(
                values, old, ret, mb.mask, self.cliprange_value, loss_agg_mode, horizon=horizon
            )
            (loss * (weight * self.world_size)).backward()
            totals["critic/vf_loss"] += metrics["vf_loss"] * weight
            totals["critic/vf_clipfrac"] += metrics["vf_clipfrac"] * weight
        if self.world_size > 1:
            self._average_gradients()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters(), self.grad_clip)
        if torch.isfinite(grad_norm):
            self.optimizer.step()
        totals["critic/grad_norm"] = float(grad_norm)
        return totals

    def _average_gradients(self) -> None:
        for p in self.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad.div_(self.world_size)

    def full_state(self) -> dict[str, Any]:
        return {"model": self.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_full_state(self, state: dict[str, Any]) -> None:
        self.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
