"""Token masks a trainer step computes over ALL its micro-batches before the backward pass, from
the current policy's log-probs (and entropies), for the losses whose token selection is
nonlinear in the batch: M2PO's second-moment mask (``policy_loss_fn: m2po``) and Clip_B's
entropy filter (``advantage_fn: clipb``, algorithm_type ``grpo_verl``).

One extra forward pass without gradients (over every micro-batch, as the loss pass). The
statistics are those of this process's micro-batches: on sharded ranks each rank selects within
its own share of the step (Trinity gathers the whole mini-batch; not done here).

Clip_B, reproduced from Trinity-RFT's ``trinity/algorithm/advantage_fn/clipb_advantage.py``
(arXiv 2602.03392): per token ``S = p · (H + log p)`` (``p`` the sampled token's probability, ``H``
the policy's entropy there), centred on its mean over the step's trained tokens,
``z = S - mean(S)``; a token of negative advantage is dropped when ``z < -mu · std(S)``
(population std), tokens of positive or zero advantage are all kept, and when ``std(S)`` is ~0
(< 1e-12) nothing is dropped. Logged as ``actor/clipb/*``.
"""

from __future__ import annotations

from typing import Any

import torch

from rft_core.algorithms.soft_losses import m2po_token_mask
from rft_core.trainer.batching import MicroBatch


def clipb_keep(
    logprobs: torch.Tensor,
    entropy: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    mu: float = 2.5,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clip_B's keep mask (float, same shape as ``mask``) and its metrics (module docstring)."""
    with torch.no_grad():
        m = mask.float()
        s = logprobs.float().exp() * (entropy.float() + logprobs.float())
        n = m.sum().clamp(min=1.0)
        mean = (s * m).sum() / n
        var = ((s - mean).square() * m).sum() / n
        std = var.sqrt()
        if float(std) < 1e-12:
            keep = torch.ones_like(m)
        else:
            drop = (advantages < 0) & (s - mean < -mu * std)
            keep = (~drop).float()
        kept = m * keep
        pos, neg = (advantages > 0).float() * m, (advantages < 0).float() * m
        metrics = {
            "actor/clipb/frac_clipped": 1.0 - float(kept.sum() / n),
            "actor/clipb/frac_clipped_pos": 1.0
            - float((kept * pos).sum() / pos.sum().clamp(min=1.0)),
            "actor/clipb/frac_clipped_neg": 1.0
            - float((kept * neg).sum() / neg.sum().clamp(min=1.0)),
            "actor/clipb/ES": float(mean),
            "actor/clipb/varS": float(var),
        }
    return keep, metrics


def _cat(parts: list[torch.Tensor]) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """Micro-batch [B, R] tensors side by side as one [1, sum B·R] row, and each one's span."""
    spans, start = [], 0
    for p in parts:
        spans.append((start, start + p.numel()))
        start += p.numel()
    return torch.cat([p.reshape(1, -1) for p in parts], dim=1), spans


def step_token_masks(
    algo: Any,
    loss_name: str,
    mbs: list[MicroBatch],
    old: list[torch.Tensor],
    advantages: list[torch.Tensor],
    forward: Any,
    model: Any,
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Per micro-batch extra loss arguments (m2po: ``m2po_mask``) and the metrics; Clip_B's
    dropped tokens leave ``mb.mask`` here. Nothing to do (no forward): empty arguments."""
    extra: list[dict[str, Any]] = [{} for _ in mbs]
    clipb = algo.advantage_fn == "clipb"
    m2po = loss_name == "m2po"
    if not (clipb or m2po):
        return extra, {}
    live = [k for k, mb in enumerate(mbs) if not mb.padding]
    logp: dict[int, torch.Tensor] = {}
    ent: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        # every micro-batch, padding ones too: sharded ranks run their forwards together
        for k, mb in enumerate(mbs):
            logp[k], ent[k] = forward.logprobs(model, mb, entropy=True)
    metrics: dict[str, float] = {}
    if not live:
        return extra, metrics
    if clipb:
        mu = float(algo.advantage_args.get("mu", 2.5))
        flat = [_cat([t[k] for k in live]) for t in (logp, ent)]
        adv, spans = _cat([advantages[k] for k in live])
        mask, _ = _cat([mbs[k].mask for k in live])
        keep, metrics_b = clipb_keep(flat[0][0], flat[1][0], adv, mask, mu)
        metrics.update(metrics_b)
        for k, (a, b) in zip(live, spans, strict=True):
            mbs[k].mask = mbs[k].mask * keep[0, a:b].view_as(mbs[k].mask).to(mbs[k].mask.dtype)
    if m2po:
        threshold = float(algo.policy_loss_args.get("m2_threshold", 0.04))
        log_ratio, spans = _cat([logp[k] - old[k] for k in live])
        adv, _ = _cat([advantages[k] for k in live])
        mask, _ = _cat([mbs[k].mask for k in live])
        keep, stats = m2po_token_mask(log_ratio, adv, mask, threshold)
        metrics.update({f"actor/{name}": value for name, value in stats.items()})
        for k in range(len(mbs)):
            extra[k]["m2po_mask"] = torch.zeros_like(mbs[k].mask, dtype=torch.bool)
        for k, (a, b) in zip(live, spans, strict=True):
            extra[k]["m2po_mask"] = keep[0, a:b].view_as(mbs[k].mask)
    return extra, metrics
