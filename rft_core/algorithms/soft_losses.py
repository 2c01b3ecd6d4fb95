"""Policy losses that weigh or mask tokens by their importance ratio instead of PPO's hard clip:
SAPO's soft gate and M2PO's second-moment mask (``algorithm.policy_loss_fn`` ``sapo``, ``m2po``),
registered in ``POLICY_LOSSES`` beside the others (``rft_core.algorithms.policy_losses``).

Reproduced from Trinity-RFT (agentscope-ai/Trinity-RFT), never copied:

- ``trinity/algorithm/policy_loss_fn/sapo_policy_loss.py`` (``SAPOPolicyLossFn``; Gao et al.
  2025, arXiv 2511.20347). As Trinity trains it, the gate is a detached per-token weight on the
  log-likelihood: ``L = -A · sg(f(r)) · lp`` with ``f(r) = sigmoid(tau (r - 1)) · 4 / tau``,
  ``tau = tau_pos`` where ``A > 0`` else ``tau_neg``. At ``r = 1`` the weight is ``2 / tau``
  (the paper's objective ``f(r)·A`` would weigh ``lp``'s gradient by ``f'(r)·r = 1``);
- ``trinity/algorithm/policy_loss_fn/m2po_policy_loss.py`` (``M2POPolicyLossFn``; M2PO, arXiv
  2510.01161): among the tokens where PPO's clip would act (``A > 0`` and ``r > 1``, or
  ``A < 0`` and ``r < 1``: the trust region), those of largest ``(log r)^2`` are masked until
  the mean ``(log r)^2`` of the remaining trust-region tokens is at most ``m2_threshold``; the
  loss ``-A · r`` over the unmasked tokens is divided by ALL trained tokens (token-mean). The
  mask is one over the trainer step (``rft_core.trainer.step_masks``); its statistics
  (``m2_before``, ``m2_after``, ``masked_fraction``, ``trust_region_fraction``) are logged as
  ``actor/*``.
"""

from __future__ import annotations

import math

import torch

from rft_core.algorithms.aggregation import aggregate_loss, masked_mean
from rft_core.algorithms.policy_losses import register_policy_loss
from rft_core.errors import ConfigError


@register_policy_loss("sapo", "advantages")
def sapo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    loss_agg_mode: str = "token-mean",
    horizon: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """SAPO (module docstring): ``L = -A · sg(sigmoid(tau (r - 1)) · 4 / tau) · lp``."""
    if tau_neg < tau_pos:
        raise ConfigError(
            "algorithm.policy_loss_fn_args.tau_neg",
            f"must be >= tau_pos ({tau_pos}), got {tau_neg} (SAPO damps negative updates more)",
            value=tau_neg,
        )
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    tau = torch.where(
        advantages > 0,
        torch.full_like(ratio, float(tau_pos)),
        torch.full_like(ratio, float(tau_neg)),
    )
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    loss = aggregate_loss(
        -advantages * gate.detach() * logprobs, mask, loss_agg_mode, horizon=horizon
    )
    value = float(loss.detach())
    with torch.no_grad():
        metrics = {
            "sapo_loss": value,
            "pg_loss": value,
            "ppo_kl": float(masked_mean(-log_ratio, mask)),
            "avg_soft_gate": float(masked_mean(gate, mask)),
            "avg_ratio": float(masked_mean(ratio, mask)),
            "pos_adv_frac": float(masked_mean((advantages > 0).float(), mask)),
        }
    return loss, metrics


def m2po_token_mask(
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    m2_threshold: float = 0.04,
) -> tuple[torch.Tensor, dict[str, float]]:
    """M2PO's token mask (bool, same shape) over ``mask``'s tokens and its statistics: the
    trust-region tokens (module docstring) sorted by ``(log r)^2``; the longest prefix of the
    sorted values whose running mean is <= ``m2_threshold`` is kept, the rest masked (none when
    the mean of all of them already is)."""
    if not math.isfinite(m2_threshold) or m2_threshold < 0:
        raise ConfigError(
            "algorithm.policy_loss_fn_args.m2_threshold",
            f"must be a finite number >= 0, got {m2_threshold}",
            value=m2_threshold,
        )
    valid = mask.bool()
    with torch.no_grad():
        lr = log_ratio.detach().double()
        adv = advantages.detach()
        trust = valid & (((adv > 0) & (lr > 0)) | ((adv < 0) & (lr < 0)))
        flat = trust.reshape(-1).nonzero(as_tuple=True)[0]
        squares = lr.square().reshape(-1)[flat]
        n = squares.numel()
        kept = torch.ones(n, dtype=torch.bool, device=squares.device)
        m2_before = float(squares.mean()) if n else 0.0
        if n and m2_before > m2_threshold:
            ordered, order = torch.sort(squares, stable=True)
            running = torch.cumsum(ordered, 0) / torch.arange(
                1, n + 1, device=ordered.device, dtype=ordered.dtype
            )
            keep_count = int((running <= m2_threshold).sum())
            kept[order[keep_count:]] = False
        keep = valid.clone().reshape(-1)
        keep[flat[~kept]] = False
        keep = keep.view_as(valid)
        tokens = int(valid.sum())
        stats = {
            "m2_before": m2_before,
            "m2_after": float(squares[kept].mean()) if int(kept.sum()) else 0.0,
            "masked_fraction": (n - int(kept.sum())) / tokens if tokens else 0.0,
            "trust_region_fraction": n / tokens if tokens else 0.0,
        }
    return keep, stats


@register_policy_loss("m2po", "advantages")
def m2po_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    m2_threshold: float = 0.04,
    log_ratio_clip: float = 20.0,
    m2po_mask: torch.Tensor | None = None,
    loss_agg_mode: str = "token-mean",
    horizon: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """M2PO (module docstring): ``L = -A · r`` on the tokens ``m2po_mask`` keeps, summed over
    them and divided by every trained token. ``r = exp(log r)`` with ``log r`` clamped to
    ``±log_ratio_clip`` in value only (its gradient is the unclamped one's). ``m2po_mask``: the
    step's (the trainer's); None: computed over this call's tokens, its statistics returned."""
    if loss_agg_mode != "token-mean":
        raise ConfigError(
            "algorithm.loss_agg_mode",
            f"m2po divides by every trained token (token-mean), got {loss_agg_mode!r}",
            value=loss_agg_mode,
            allowed=["token-mean"],
        )
    if not math.isfinite(log_ratio_clip) or log_ratio_clip <= 0:
        raise ConfigError(
            "algorithm.policy_loss_fn_args.log_ratio_clip",
            f"must be a finite number > 0, got {log_ratio_clip}",
            value=log_ratio_clip,
        )
    log_ratio = logprobs - old_logprobs
    stats: dict[str, float] = {}
    if m2po_mask is None:
        m2po_mask, stats = m2po_token_mask(log_ratio, advantages, mask, m2_threshold)
    clamped = torch.clamp(log_ratio, -log_ratio_clip, log_ratio_clip)
    ratio = torch.exp(log_ratio + (clamped - log_ratio).detach())
    pg = torch.where(m2po_mask.bool(), -advantages * ratio, torch.zeros_like(ratio))
    loss = aggregate_loss(pg, mask, "token-mean", horizon=horizon)
    with torch.no_grad():
        metrics = {
            "pg_loss": float(loss.detach()),
            "ppo_kl": float(masked_mean(-log_ratio, mask)),
            "avg_ratio": float(masked_mean(ratio, mask)),
            **stats,
        }
    return loss, metrics
