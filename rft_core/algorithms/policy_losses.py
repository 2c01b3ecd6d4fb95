"""Policy losses (``algorithm.policy_loss_fn``): PPO clip with dual clip, SFT, DPO, in the
``POLICY_LOSSES`` registry; and the critic's clipped value loss. Each returns
``(loss, metrics)``; metric names are the ones the trainer logs under ``actor/`` (``pg_loss``,
``pg_clipfrac``, ``ppo_kl``, ``pg_clipfrac_lower``, ``sft_loss``, ``dpo_loss``...) or
``critic/`` (``vf_loss``, ``vf_clipfrac``).

A registry entry says which inputs the trainer hands its function (``inputs``):

- ``"advantages"``: ``fn(logprobs, old_logprobs, advantages, mask, *, loss_agg_mode, horizon,
  **args)`` per micro-batch, token tensors [B, T] over response tokens (``mask`` is 1 on
  trained tokens); the trainer adds the KL loss, the entropy bonus and the critic's update;
- ``"logprobs"``: ``fn(logprobs, mask, loss_agg_mode, *, horizon, **args)``, the same layout,
  no old log-probs, advantages or reference (SFT);
- ``"pairs"``: ``fn(chosen_sum, rejected_sum, ref_chosen_sum, ref_rejected_sum, **args)``, per-pair
  sums of response log-probs [P] under the policy and the reference (DPO);
- ``"mixed"``: the ``"advantages"`` inputs plus ``expert_mask`` [B] (rows from the expert SFT
  data), ``step`` (trainer steps done) and the step's ``usual_totals`` / ``expert_totals``
  ``(tokens, rows)``: the function weights each part by its own share of the step (mix,
  mix_chord); its ``*_loss`` metrics come already weighted.

``args`` are ``algorithm.policy_loss_fn_args``. A token-level loss's metrics named ``*_loss``
are averaged over the batch as the loss is, the others as token means; a pair loss's over pairs.
A new loss is one decorated function: ``@register_policy_loss("name", "advantages")``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from rft_core.algorithms.aggregation import aggregate_loss, masked_mean
from rft_core.errors import ConfigError
from rft_core.registry import Registry

POLICY_LOSS_INPUTS = ("advantages", "logprobs", "pairs", "mixed")


@dataclass(frozen=True)
class PolicyLoss:
    """A registry entry: the loss function and the inputs it takes (module docstring)."""

    name: str
    fn: Callable[..., tuple[torch.Tensor, dict[str, float]]]
    inputs: str


# in registration order: ppo (the default) first, as the config's choices list them
POLICY_LOSSES: Registry[PolicyLoss] = Registry(
    "policy loss", "algorithm.policy_loss_fn", sort_names=False
)


def register_policy_loss(
    name: str, inputs: str
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator for a policy loss; ``inputs`` is one of ``POLICY_LOSS_INPUTS`` (module doc)."""
    if inputs not in POLICY_LOSS_INPUTS:
        raise ValueError(f"policy loss inputs must be one of {POLICY_LOSS_INPUTS}, got {inputs!r}")

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        POLICY_LOSSES.add(name, PolicyLoss(name, fn, inputs))
        return fn

    return decorator


@register_policy_loss("ppo", "advantages")
def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_range: float = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
    horizon: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate with dual clip (Ye et al. 2019) for negative advantages.

    ratio = exp(clamp(lp - old_lp, ±20));
    L = max(-A·ratio, -A·clip(ratio, 1-low, 1+high)), and for A < 0 also min(L, -A·c).
    ``clip_range_low/high`` default to ``clip_range`` (Trinity's names).
    """
    low = clip_range if clip_range_low is None else clip_range_low
    high = clip_range if clip_range_high is None else clip_range_high
    if clip_ratio_c <= 1.0:
        raise ConfigError(
            "algorithm.policy_loss_fn_args.clip_ratio_c",
            f"must be > 1.0 (dual-clip lower bound), got {clip_ratio_c}",
            value=clip_ratio_c,
        )
    log_ratio = torch.clamp(logprobs - old_logprobs, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    loss_ppo = torch.maximum(loss_unclipped, loss_clipped)
    loss_dual = torch.minimum(loss_ppo, -advantages * clip_ratio_c)
    negative = advantages < 0
    pg_losses = torch.where(negative, loss_dual, loss_ppo)
    pg_loss = aggregate_loss(pg_losses, mask, loss_agg_mode, horizon=horizon)

    with torch.no_grad():
        clipfrac = masked_mean(torch.gt(loss_clipped, loss_unclipped).float(), mask)
        clipfrac_lower = masked_mean(
            (torch.gt(loss_ppo, -advantages * clip_ratio_c) & negative).float(), mask
        )
        ppo_kl = masked_mean(-log_ratio, mask)
    metrics = {
        "pg_loss": float(pg_loss.detach()),
        "pg_clipfrac": float(clipfrac),
        "ppo_kl": float(ppo_kl),
        "pg_clipfrac_lower": float(clipfrac_lower),
    }
    return pg_loss, metrics


@register_policy_loss("sft", "logprobs")
def sft_loss(
    logprobs: torch.Tensor,
    mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    *,
    horizon: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Negative log-likelihood of the target tokens."""
    loss = aggregate_loss(-logprobs, mask, loss_agg_mode, horizon=horizon)
    return loss, {"sft_loss": float(loss.detach())}


@register_policy_loss("dpo", "pairs")
def dpo_loss(
    chosen_logprobs_sum: torch.Tensor,
    rejected_logprobs_sum: torch.Tensor,
    ref_chosen_sum: torch.Tensor,
    ref_rejected_sum: torch.Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPO (Rafailov et al. 2023), with conservative label smoothing (cDPO) when
    ``label_smoothing`` > 0. Inputs are per-pair sums of response log-probs, shape [P].

    z = beta·((c - ref_c) - (r - ref_r));
    loss = mean(-(1-ε)·logσ(z) - ε·logσ(-z)).
    """
    chosen_rewards = beta * (chosen_logprobs_sum - ref_chosen_sum)
    rejected_rewards = beta * (rejected_logprobs_sum - ref_rejected_sum)
    logits = chosen_rewards - rejected_rewards
    losses = -(1.0 - label_smoothing) * F.logsigmoid(logits) - label_smoothing * F.logsigmoid(
        -logits
    )
    loss = losses.mean()
    with torch.no_grad():
        metrics = {
            "dpo_loss": float(loss.detach()),
            "dpo_chosen_reward": float(chosen_rewards.mean()),
            "dpo_rejected_reward": float(rejected_rewards.mean()),
            "dpo_accuracy": float((chosen_rewards > rejected_rewards).float().mean()),
            "dpo_margin": float(logits.mean()),
        }
    return loss, metrics


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    cliprange_value: float = 0.5,
    loss_agg_mode: str = "token-mean",
    *,
    horizon: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped value loss of the critic (verl/PPO2):
    0.5 · aggregate(max((v - R)², (clip(v, v_old ± c) - R)²))."""
    clipped = old_values + torch.clamp(values - old_values, -cliprange_value, cliprange_value)
    loss_unclipped = (values - returns).square()
    loss_clipped = (clipped - returns).square()
    loss = 0.5 * aggregate_loss(
        torch.maximum(loss_unclipped, loss_clipped), mask, loss_agg_mode, horizon=horizon
    )
    with torch.no_grad():
        clipfrac = masked_mean(torch.gt(loss_clipped, loss_unclipped).float(), mask)
    return loss, {"vf_loss": float(loss.detach()), "vf_clipfrac": float(clipfrac)}


# ---- mix / mix_chord: RL on the rollouts plus SFT on expert data (Trinity-RFT's MIX, CHORD) ----


def chord_mu(step: int, warmup_steps: int, decay_steps: int, peak: float, valley: float) -> float:
    """CHORD's weight of the SFT part at trainer step ``step``: linear warmup 0 -> ``peak`` over
    ``warmup_steps``, cosine decay ``peak`` -> ``valley`` over ``decay_steps``, then ``valley``."""
    if step < warmup_steps:
        return step / warmup_steps * peak
    if step >= warmup_steps + decay_steps:
        return valley
    progress = (step - warmup_steps) / decay_steps
    return valley + (peak - valley) * 0.5 * (1.0 + math.cos(math.pi * progress))


def chord_phi(token_prob: torch.Tensor) -> torch.Tensor:
    """CHORD's token weight p·(1-p): tokens the policy already finds near-certain or
    near-impossible count little (Zhang et al. 2025, "On-Policy RL Meets Off-Policy Experts")."""
    return token_prob * (1.0 - token_prob)


def _part_share(mode: str, mask: torch.Tensor, totals: tuple[float, int] | None) -> float:
    """A micro-batch part's share of its step-wide part (1.0 when it is the whole part)."""
    if totals is None:
        return 1.0
    tokens, rows = totals
    if mode == "token-mean":
        return float(mask.sum()) / max(tokens, 1.0)
    if mode == "seq-mean-token-sum-norm":
        return 1.0
    return mask.shape[0] / max(rows, 1)


@register_policy_loss("mix", "mixed")
def mix_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    expert_mask: torch.Tensor,
    *,
    step: int = 0,
    mu: float = 0.1,
    clip_range: float = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    clip_ratio_c: float = 3.0,
    use_token_level_loss_in_sft: bool = False,
    loss_agg_mode: str = "token-mean",
    horizon: int | None = None,
    usual_totals: tuple[float, int] | None = None,
    expert_totals: tuple[float, int] | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Trinity-RFT's MIX: (1-mu)·PPO-clip(rollouts) + mu·NLL(expert responses), fixed ``mu``:
    :func:`mix_chord_policy_loss` with a flat schedule and no phi weighting. The SFT part is a
    per-sequence token mean unless ``use_token_level_loss_in_sft``.

    Trinity's manual normalisation knobs (``ppo_mini_batch_size``, ``read_batch_size_usual``,
    ``use_dynamic_bsz`` ...) are not taken (the trainer warns and drops them): the trainer
    passes the step's real counts as ``*_totals`` instead."""
    return mix_chord_policy_loss(
        logprobs,
        old_logprobs,
        advantages,
        mask,
        expert_mask,
        step=step,
        mu_peak=mu,
        mu_valley=mu,
        enable_phi_function=False,
        clip_range=clip_range,
        clip_range_low=clip_range_low,
        clip_range_high=clip_range_high,
        clip_ratio_c=clip_ratio_c,
        use_token_level_loss_in_sft=use_token_level_loss_in_sft,
        loss_agg_mode=loss_agg_mode,
        horizon=horizon,
        usual_totals=usual_totals,
        expert_totals=expert_totals,
    )


@register_policy_loss("mix_chord", "mixed")
def mix_chord_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    expert_mask: torch.Tensor,
    *,
    step: int = 0,
    mu_warmup_steps: int = 0,
    mu_decay_steps: int = 0,
    mu_peak: float = 0.1,
    mu_valley: float = 0.1,
    enable_phi_function: bool = True,
    clip_range: float = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    clip_ratio_c: float = 3.0,
    use_token_level_loss_in_sft: bool = True,
    loss_agg_mode: str = "token-mean",
    horizon: int | None = None,
    usual_totals: tuple[float, int] | None = None,
    expert_totals: tuple[float, int] | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """CHORD (Trinity-RFT's ``mix_chord``): (1-mu)·PPO-clip over the rollout rows + mu·SFT over
    the expert rows, ``mu`` on the :func:`chord_mu` schedule at ``step``; with
    ``enable_phi_function`` each expert token's NLL is weighted by :func:`chord_phi` of its
    probability (detached). The SFT part is a token mean (``use_token_level_loss_in_sft``) or
    a per-sequence one. Each part is averaged over its own rows of the trainer step
    (``*_totals``, (tokens, rows); None: this call holds them all), so the expert share of a
    micro-batch changes neither part's scale. Trinity's batch-size knobs: as in
    :func:`mix_policy_loss`."""
    mu = chord_mu(step, mu_warmup_steps, mu_decay_steps, mu_peak, mu_valley)
    expert_mask = expert_mask.to(torch.bool)
    usual = ~expert_mask
    zero = logprobs.sum() * 0.0  # keeps the graph when a part is empty
    metrics: dict[str, float] = {}
    rl_loss = sft_part = zero
    if bool(usual.any()):
        part_mask = mask[usual]
        rl_loss, m = ppo_clip_loss(
            logprobs[usual],
            old_logprobs[usual],
            advantages[usual],
            part_mask,
            clip_range=clip_range,
            clip_range_low=clip_range_low,
            clip_range_high=clip_range_high,
            clip_ratio_c=clip_ratio_c,
            loss_agg_mode=loss_agg_mode,
            horizon=horizon,
        )
        share = _part_share(loss_agg_mode, part_mask, usual_totals)
        rl_loss = rl_loss * share
        metrics.update({f"usual/{k}": v * share for k, v in m.items()})
    if bool(expert_mask.any()):
        sft_mode = "token-mean" if use_token_level_loss_in_sft else "seq-mean-token-mean"
        part_mask = mask[expert_mask]
        lp = logprobs[expert_mask]
        weight = chord_phi(torch.exp(lp)).detach() if enable_phi_function else torch.ones_like(lp)
        sft_part = aggregate_loss(-lp * weight, part_mask, sft_mode)
        sft_part = sft_part * _part_share(sft_mode, part_mask, expert_totals)
        name = "sft_phi_loss" if enable_phi_function else "sft_loss"
        metrics[f"expert/{name}"] = float(sft_part.detach())
    loss = (1.0 - mu) * rl_loss + mu * sft_part
    metrics["mix_loss"] = float(loss.detach())
    metrics["mu"] = mu
    return loss, metrics
