"""Policy losses (``algorithm.policy_loss_fn``): PPO clip with dual clip, SFT, DPO, and the
rest of Trinity-RFT's family (OPMD, GSPO, CISPO, TOPR, sPPO, REC), in the ``POLICY_LOSSES``
registry; and the critic's clipped value loss. Each returns
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
# (sapo and m2po register themselves from rft_core/algorithms/soft_losses.py, imported when the
# registry is first read)
POLICY_LOSSES: Registry[PolicyLoss] = Registry(
    "policy loss",
    "algorithm.policy_loss_fn",
    sort_names=False,
    builtin_modules=("rft_core.algorithms.soft_losses",),
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


def _ratio_metrics(log_ratio: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """``ppo_kl`` (mean of -log ratio) and ``avg_ratio`` over trained tokens."""
    with torch.no_grad():
        return {
            "ppo_kl": float(masked_mean(-log_ratio, mask)),
            "avg_ratio": float(masked_mean(torch.exp(log_ratio), mask)),
        }


@register_policy_loss("opmd", "advantages")
def opmd_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    tau: float = 1.0,
    loss_agg_mode: str = "token-mean",
    horizon: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """OPMD (Trinity-RFT): the policy-gradient surrogate without a ratio,
    L = -A·lp / (1 + tau); ``tau`` regularizes the step towards the current policy. Old
    log-probs are not used."""
    loss = aggregate_loss(-advantages * logprobs, mask, loss_agg_mode, horizon=horizon) / (
        1.0 + tau
    )
    value = float(loss.detach())
    return loss, {"opmd_loss": value, "pg_loss": value}


@register_policy_loss("gspo", "advantages")
def gspo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_range: float | None = None,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    loss_agg_mode: str = "seq-mean-token-mean",
    horizon: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO (Zheng et al. 2025): PPO clipping on the sequence-level importance ratio
    s_i = exp(mean_t(lp - old_lp)) over each response's trained tokens.

    Per token the ratio is exp(lp_t - sg(lp_t) + sg(log s_i)): its value is s_i, its gradient
    flows through lp_t; L = max(-A·s, -A·clip(s, 1-low, 1+high)). ``clip_range_low/high``
    default to ``clip_range``, else to the paper's (and Trinity's) 3e-4 / 4e-4. The sequence log
    ratio is clamped to ±20 as PPO's is.
    """
    low = clip_range_low if clip_range_low is not None else clip_range
    high = clip_range_high if clip_range_high is not None else clip_range
    low = 3e-4 if low is None else low
    high = 4e-4 if high is None else high
    log_ratio = logprobs - old_logprobs
    seq_log_ratio = torch.clamp(masked_mean(log_ratio, mask, dim=-1), min=-20.0, max=20.0)
    ratio = torch.exp(logprobs - logprobs.detach() + seq_log_ratio.detach().unsqueeze(-1))
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    pg_loss = aggregate_loss(
        torch.maximum(loss_unclipped, loss_clipped), mask, loss_agg_mode, horizon=horizon
    )
    with torch.no_grad():
        rows = mask.sum(dim=-1) > 0
        metrics = {
            "pg_loss": float(pg_loss.detach()),
            "pg_clipfrac": float(masked_mean(torch.gt(loss_clipped, loss_unclipped).float(), mask)),
            "ppo_kl": float(masked_mean(-log_ratio, mask)),
            "ppo_kl_seq": float(-seq_log_ratio[rows].mean()) if rows.any() else 0.0,
        }
    return pg_loss, metrics


@register_policy_loss("cispo", "advantages")
def cispo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_range_low: float = 1.0,
    clip_range_high: float = 0.28,
    loss_agg_mode: str = "token-mean",
    horizon: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """CISPO (MiniMax-M1, 2025): clip the importance weight, not the update.

    L = -sg(clip(ratio, 1-low, 1+high) · m) · A · lp, where m = 0 on a token whose ratio is
    above 1+high with A > 0 or below 1-low with A < 0 (else 1). Every other token keeps a
    gradient, however far its ratio is clipped. Defaults as the paper: no lower bound (low 1.0).
    """
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio).detach()
    dropped = ((ratio > 1.0 + clip_range_high) & (advantages > 0)) | (
        (ratio < 1.0 - clip_range_low) & (advantages < 0)
    )
    weight = torch.clamp(ratio, 1.0 - clip_range_low, 1.0 + clip_range_high) * (~dropped).float()
    loss = aggregate_loss(-advantages * weight * logprobs, mask, loss_agg_mode, horizon=horizon)
    value = float(loss.detach())
    metrics = {"cispo_loss": value, "pg_loss": value, **_ratio_metrics(log_ratio.detach(), mask)}
    metrics["masked_frac"] = float(masked_mean((~dropped).float(), mask))
    return loss, metrics


@register_policy_loss("topr", "advantages")
def topr_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    advantage_threshold: float = 0.0,
    loss_agg_mode: str = "token-mean",
    horizon: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """TOPR (Le Roux et al. 2025, tapered off-policy REINFORCE): L = -sg(α)·A·lp with
    α = clip(ratio, 0, 1) where A <= ``advantage_threshold`` (negative samples are tapered) and
    α = 1 elsewhere (positive samples get plain SFT-like updates). ``A`` is the raw reward with
    the ``reinforce`` advantage fn, as in the paper, or a baselined advantage."""
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio).detach()
    alpha = torch.where(
        advantages <= advantage_threshold, torch.clamp(ratio, 0.0, 1.0), torch.ones_like(ratio)
    )
    loss = aggregate_loss(-alpha * advantages * logprobs, mask, loss_agg_mode, horizon=horizon)
    value = float(loss.detach())
    metrics = {"topr_loss": value, "pg_loss": value, **_ratio_metrics(log_ratio.detach(), mask)}
    metrics["avg_alpha"] = float(masked_mean(alpha, mask))
    return loss, metrics


@register_policy_loss("sppo", "advantages")
def sppo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon: float = 0.3,
    loss_agg_mode: str = "token-mean",
    horizon: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """sPPO (Vaswani et al. 2021, arXiv 2108.05828), as Trinity-RFT trains it: the surrogate
    -A·(lp - old_lp) on tokens whose ratio lies in [1/(1+eps), 1+eps], zero (no gradient)
    outside."""
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio).detach()
    inside = (ratio >= 1.0 / (1.0 + epsilon)) & (ratio <= 1.0 + epsilon)
    loss = aggregate_loss(
        -advantages * log_ratio * inside.float(), mask, loss_agg_mode, horizon=horizon
    )
    metrics = {"pg_loss": float(loss.detach()), **_ratio_metrics(log_ratio.detach(), mask)}
    metrics["pg_clipfrac"] = float(masked_mean((~inside).float(), mask))
    return loss, metrics


REC_CLIP_MODES = ("none", "one-side", "two-side", "ring")
REC_WEIGHTS = ("none", "importance_sampling", "advantage")
REC_REGULARIZERS = ("none", "k2", "forward-kl")


def _one_of(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(
            f"algorithm.policy_loss_fn_args.{name}",
            f"must be one of {', '.join(allowed)}, got {value!r}",
            value=value,
            allowed=list(allowed),
        )


@register_policy_loss("rec", "advantages")
def rec_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    epsilon_low_prime: float = 0.6,
    epsilon_high_prime: float = 2.0,
    clip_mode: str = "none",
    weight: str = "none",
    regularizer: str = "none",
    regularizer_coef: float = 0.0,
    temp: float = 1.0,
    loss_agg_mode: str = "token-mean",
    horizon: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """REC (Trinity-RFT's REINFORCE with clipping): L = -w·A·lp on the tokens ``clip_mode``
    keeps, plus a regularizer. r = sg(ratio).

    - ``clip_mode``: ``none`` keeps every token; ``two-side`` keeps 1-lo <= r <= 1+hi;
      ``one-side`` keeps r <= 1+hi where A >= 0 and r >= 1-lo where A <= 0; ``ring`` keeps
      two-side's band plus r <= 1-lo' where A >= 0 and r >= 1+hi' where A <= 0 (``*_prime``).
    - ``weight``: ``none`` (w = 1), ``importance_sampling`` (w = r), ``advantage``
      (w = exp(A / temp)).
    - ``regularizer``: ``k2`` adds coef·(lp - old_lp)² (Kimi's, its ½ absorbed in coef);
      ``forward-kl`` adds -coef·lp.
    """
    _one_of("clip_mode", clip_mode, REC_CLIP_MODES)
    _one_of("weight", weight, REC_WEIGHTS)
    _one_of("regularizer", regularizer, REC_REGULARIZERS)
    log_ratio = logprobs - old_logprobs
    r = torch.exp(log_ratio).detach()
    pos, neg = advantages >= 0, advantages <= 0
    band = (r >= 1.0 - epsilon_low) & (r <= 1.0 + epsilon_high)
    if clip_mode == "two-side":
        inside = band
    elif clip_mode == "one-side":
        inside = (pos & (r <= 1.0 + epsilon_high)) | (neg & (r >= 1.0 - epsilon_low))
    elif clip_mode == "ring":
        inside = (
            band | (pos & (r <= 1.0 - epsilon_low_prime)) | (neg & (r >= 1.0 + epsilon_high_prime))
        )
    else:
        inside = torch.ones_like(r, dtype=torch.bool)
    if weight == "importance_sampling":
        advantages = advantages * r
    elif weight == "advantage":
        advantages = advantages * torch.exp(advantages / temp)
    losses = -advantages * logprobs * inside.float()
    if regularizer == "k2":
        losses = losses + regularizer_coef * log_ratio.square()
    elif regularizer == "forward-kl":
        losses = losses - regularizer_coef * logprobs
    loss = aggregate_loss(losses, mask, loss_agg_mode, horizon=horizon)
    metrics = {"pg_loss": float(loss.detach()), **_ratio_metrics(log_ratio.detach(), mask)}
    metrics["pg_clipfrac"] = float(masked_mean((~inside).float(), mask))
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
