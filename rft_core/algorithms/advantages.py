"""Advantage functions (``algorithm.advantage_fn``), each a short function to check against its
paper, plus a registry so users can plug in their own.

Two levels, stated by each registry entry's ``level``:

- ``"group"``: one scalar per response from the rewards of its group (all responses sampled for
  one task in one explorer step share a ``group_id``). Computed by the explorer; the trainer
  broadcasts the value to every response token. Call ``entry.group(rewards, group_ids, **args)``
  -> ``(advantages[B], keep[B])``; ``keep`` is False for responses to drop (std_threshold).
- ``"token"``: a [B, T] tensor from token-level rewards (outcome reward on the last response
  token, see :func:`outcome_to_token_rewards`). Computed by the trainer. ``ppo``/``gae`` also
  needs the critic's values and returns ``(advantages, returns)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rft_core.errors import ConfigError
from rft_core.registry import Registry


def _group_indices(group_ids: Sequence[str]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for i, gid in enumerate(group_ids):
        groups.setdefault(gid, []).append(i)
    return groups


def _check_batch(rewards: torch.Tensor, group_ids: Sequence[str]) -> None:
    if rewards.dim() != 1 or rewards.shape[0] != len(group_ids):
        raise ValueError(
            f"rewards must be 1-D with one entry per group id; got shape {tuple(rewards.shape)} "
            f"and {len(group_ids)} group ids"
        )


def _exact(rewards: torch.Tensor) -> torch.Tensor:
    """Rewards in fp64 for a group's mean and std: the fp32 mean of equal rewards (0.1 eight
    times) can miss them by an ulp, which ``/ (std + 1e-6)`` turns into advantages of ~0.01 for a
    group that should train nothing; fp64 sums of fp32 values are exact, so such a group gets 0.
    The functions return fp32."""
    return rewards.detach().double()


def grpo_advantages(
    rewards: torch.Tensor,
    group_ids: Sequence[str],
    *,
    epsilon: float = 1e-6,
    std_threshold: float | None = None,
    std_cal_level: str = "group",
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO (Shao et al. 2024): ``A_i = (r_i - mean(r_group)) / (std(r_group) + epsilon)``.

    std is unbiased (n-1), or of the whole batch with ``std_cal_level="batch"`` (the mean stays
    per group). A group of one keeps its raw reward. With ``std_threshold``, groups whose
    reward std is <= the threshold are dropped: advantage 0 and ``keep`` False.
    Returns ``(advantages[B], keep[B] bool)``.
    """
    _check_batch(rewards, group_ids)
    if std_cal_level not in ("group", "batch"):
        raise ConfigError(
            "algorithm.advantage_fn_args.std_cal_level",
            f"must be 'group' or 'batch', got {std_cal_level!r}",
            value=std_cal_level,
            allowed=["group", "batch"],
        )
    rewards = _exact(rewards)
    advantages = torch.zeros_like(rewards)
    keep = torch.ones_like(rewards, dtype=torch.bool)
    batch_std = rewards.std() if rewards.numel() > 1 else torch.tensor(1.0)
    for idx in _group_indices(group_ids).values():
        group = rewards[idx]
        if len(idx) == 1:
            advantages[idx] = group
            continue
        group_std = group.std()
        if std_threshold is not None and group_std <= std_threshold:
            keep[idx] = False
            continue
        std = batch_std if std_cal_level == "batch" else group_std
        advantages[idx] = (group - group.mean()) / (std + epsilon)
    return advantages.float(), keep


def rloo_advantages(rewards: torch.Tensor, group_ids: Sequence[str]) -> torch.Tensor:
    """RLOO (Ahmadian et al. 2024): the baseline of response i is the mean reward of the other
    responses of its group, ``A_i = r_i - mean_{j≠i} r_j = n/(n-1) · (r_i - mean(r))``.
    A group of one keeps its raw reward."""
    _check_batch(rewards, group_ids)
    rewards = _exact(rewards)
    advantages = rewards.clone()
    for idx in _group_indices(group_ids).values():
        n = len(idx)
        if n > 1:
            group = rewards[idx]
            others_mean = (group.sum() - group) / (n - 1)
            advantages[idx] = group - others_mean
    return advantages.float()


def reinforce_advantages(rewards: torch.Tensor, group_ids: Sequence[str]) -> torch.Tensor:
    """REINFORCE without a baseline: ``A_i = r_i`` (Trinity's ``reinforce``, TOPR's default,
    whose paper trains on the raw reward)."""
    _check_batch(rewards, group_ids)
    return rewards.detach().float().clone()


def _baseline_advantages(
    rewards: torch.Tensor,
    group_ids: Sequence[str],
    baseline: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """``A_i = r_i - baseline(r_group)``; a group of one keeps its raw reward (baseline 0)."""
    _check_batch(rewards, group_ids)
    rewards = _exact(rewards)
    advantages = rewards.clone()
    for idx in _group_indices(group_ids).values():
        if len(idx) > 1:
            advantages[idx] = rewards[idx] - baseline(rewards[idx])
    return advantages.float()


def opmd_advantages(
    rewards: torch.Tensor,
    group_ids: Sequence[str],
    *,
    opmd_baseline: str = "mean",
    tau: float = 1.0,
) -> torch.Tensor:
    """OPMD (Trinity-RFT's online policy mirror descent): ``A_i = r_i - b`` with the group
    baseline ``b = mean(r)`` or, with ``opmd_baseline="logavgexp"``,
    ``b = tau · log(mean(exp(r / tau)))`` (the soft maximum the mirror-descent step aims at)."""
    if opmd_baseline == "mean":
        return _baseline_advantages(rewards, group_ids, torch.mean)
    if opmd_baseline == "logavgexp":
        return _baseline_advantages(
            rewards,
            group_ids,
            lambda r: tau * (torch.logsumexp(r / tau, dim=0) - math.log(r.numel())),
        )
    raise ConfigError(
        "algorithm.advantage_fn_args.opmd_baseline",
        f"must be 'mean' or 'logavgexp', got {opmd_baseline!r}",
        value=opmd_baseline,
        allowed=["mean", "logavgexp"],
    )


def asymre_advantages(
    rewards: torch.Tensor, group_ids: Sequence[str], *, baseline_shift: float = -0.1
) -> torch.Tensor:
    """AsymRE (Arnal et al. 2025, asymmetric REINFORCE): ``A_i = r_i - (mean(r) + shift)``; a
    negative ``baseline_shift`` weighs positive rewards more than negative ones."""
    return _baseline_advantages(rewards, group_ids, lambda r: r.mean() + baseline_shift)


def rec_advantages(
    rewards: torch.Tensor,
    group_ids: Sequence[str],
    *,
    epsilon: float = 1e-6,
    std_normalize: bool = False,
    drop: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REC (Trinity-RFT's REINFORCE-with-clipping family): ``A_i = r_i - mean(r)``, divided by
    ``std(r) + epsilon`` (biased std) with ``std_normalize``.

    ``drop="balance"``: where a group has more responses below its mean than at or above it,
    that many extra ones below, picked at random, are dropped (``keep`` False, advantage 0) and
    the mean and std are those of the responses kept. A group of one (or one kept response)
    has mean 0 and std 1. Returns ``(advantages[B], keep[B] bool)``.
    """
    _check_batch(rewards, group_ids)
    if drop not in (None, "none", "balance"):
        raise ConfigError(
            "algorithm.advantage_fn_args.drop",
            f"must be null or 'balance', got {drop!r}",
            value=drop,
            allowed=["balance"],
        )
    rewards = _exact(rewards)
    advantages = torch.zeros_like(rewards)
    keep = torch.ones_like(rewards, dtype=torch.bool)
    for idx in _group_indices(group_ids).values():
        group = rewards[idx]
        kept = torch.ones(len(idx), dtype=torch.bool)
        below = group < group.mean()
        extra = int(below.sum()) - int((~below).sum())
        if drop == "balance" and extra > 0:
            below_idx = below.nonzero(as_tuple=True)[0]
            kept[below_idx[torch.randperm(len(below_idx))[:extra]]] = False
        if int(kept.sum()) <= 1:
            mean, std = torch.tensor(0.0), torch.tensor(1.0)
        else:
            mean, std = group[kept].mean(), group[kept].std(unbiased=False)
        adv = group - mean
        if std_normalize:
            adv = adv / (std + epsilon)
        advantages[idx] = torch.where(kept, adv, torch.zeros_like(adv))
        keep[idx] = kept
    return advantages.float(), keep


def masked_whiten(
    values: torch.Tensor,
    mask: torch.Tensor,
    eps: float = 1e-8,
    sum_across_ranks: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) over unmasked entries, with the unbiased variance.
    ``sum_across_ranks`` (sharded trainers) makes the statistics those of every rank's entries."""
    total = sum_across_ranks or (lambda t: t)
    mask = mask.to(values.dtype)
    count, weighted = total(torch.stack([mask.sum(), (values * mask).sum()]))
    mean = weighted / count.clamp(min=1.0)
    var = total(((values - mean).square() * mask).sum()) / (count - 1).clamp(min=1.0)
    return (values - mean) * torch.rsqrt(var + eps)


def outcome_to_token_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Place each response's scalar reward on its last unmasked token: [B] -> [B, T]."""
    token_rewards = torch.zeros(mask.shape, dtype=torch.float32, device=rewards.device)
    positions = torch.arange(mask.shape[-1], device=mask.device).expand_as(mask)
    last = torch.where(mask.bool(), positions, torch.full_like(positions, -1)).max(dim=-1).values
    has_tokens = last >= 0
    rows = torch.arange(mask.shape[0], device=mask.device)[has_tokens]
    token_rewards[rows, last[has_tokens]] = rewards.float()[has_tokens]
    return token_rewards


def reinforce_plus_plus_advantages(
    token_rewards: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    sum_across_ranks: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """REINFORCE++ (Hu 2025): discounted return-to-go per token, whitened over all unmasked
    tokens of the batch (the batch is the baseline). Masked tokens get 0."""
    mask_f = mask.to(torch.float32)
    returns = torch.zeros_like(token_rewards, dtype=torch.float32)
    running = torch.zeros(token_rewards.shape[0], device=token_rewards.device)
    for t in reversed(range(token_rewards.shape[1])):
        running = token_rewards[:, t].float() + gamma * running
        returns[:, t] = running
        running = running * mask_f[:, t]
    return masked_whiten(returns, mask_f, sum_across_ranks=sum_across_ranks) * mask_f


def gae_advantages(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
    *,
    whiten: bool = True,
    sum_across_ranks: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE (Schulman et al. 2016) for PPO with a critic.

    δ_t = r_t + γ·V_{t+1} - V_t;  A_t = δ_t + γλ·A_{t+1};  returns = A + V (before whitening).
    Masked positions are skipped (their value and advantage carry through), as in verl.
    Advantages are whitened over unmasked tokens unless ``whiten=False``.
    """
    mask_f = mask.to(torch.float32)
    values = values.float()
    rewards = token_rewards.float()
    next_value = torch.zeros(rewards.shape[0], device=rewards.device)
    last_gae = torch.zeros(rewards.shape[0], device=rewards.device)
    reversed_advantages = []
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        gae = delta + gamma * lam * last_gae
        m = mask_f[:, t]
        next_value = values[:, t] * m + (1 - m) * next_value
        last_gae = gae * m + (1 - m) * last_gae
        reversed_advantages.append(last_gae)
    advantages = torch.stack(reversed_advantages[::-1], dim=1)
    returns = advantages + values
    if whiten:
        advantages = masked_whiten(advantages, mask_f, sum_across_ranks=sum_across_ranks) * mask_f
    return advantages, returns


@dataclass(frozen=True)
class AdvantageFn:
    """A registry entry. Calling it calls ``fn`` with the same arguments."""

    name: str
    fn: Callable[..., Any]
    level: str  # "group" or "token"
    needs_values: bool = False
    # a group fn over the turns of step-wise episodes (step_wise_grpo, gigpo): takes ``turns``
    needs_turns: bool = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def group(
        self,
        rewards: torch.Tensor,
        group_ids: Sequence[str],
        *,
        turns: Sequence[Any] | None = None,
        **args: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Uniform call for group-level fns: always ``(advantages[B], keep[B])``. ``turns``
        (``turn_advantages.turns_of``) go to the fns that take them."""
        if self.level != "group":
            raise ValueError(f"advantage fn {self.name!r} is token-level; call it directly")
        if self.needs_turns:
            args = {**args, "turns": turns}
        out = self.fn(rewards, group_ids, **args)
        if isinstance(out, tuple):
            return out
        return out, torch.ones_like(out, dtype=torch.bool)


# the turn-level fns (step_wise_grpo, gigpo), raft's filter and clipb register themselves from
# rft_core/algorithms/turn_advantages.py, imported when the registry is first read
ADVANTAGE_FNS: Registry[AdvantageFn] = Registry(
    "advantage function",
    "algorithm.advantage_fn",
    builtin_modules=("rft_core.algorithms.turn_advantages",),
)


def register_advantage_fn(
    name: str, level: str, *, needs_values: bool = False, needs_turns: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator for a user advantage fn; ``level`` is "group" or "token" (see module doc);
    ``needs_turns``: a group fn that takes ``turns`` (``rft_core.algorithms.turn_advantages``)."""
    if level not in ("group", "token"):
        raise ValueError(f"advantage fn level must be 'group' or 'token', got {level!r}")

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        ADVANTAGE_FNS.add(name, AdvantageFn(name, fn, level, needs_values, needs_turns))
        return fn

    return decorator


def get_advantage_fn(name: str) -> AdvantageFn:
    return ADVANTAGE_FNS.get(name)


register_advantage_fn("grpo", "group")(grpo_advantages)
register_advantage_fn("rloo", "group")(rloo_advantages)
register_advantage_fn("opmd", "group")(opmd_advantages)
register_advantage_fn("asymre", "group")(asymre_advantages)
register_advantage_fn("rec", "group")(rec_advantages)
register_advantage_fn("reinforce", "group")(reinforce_advantages)
register_advantage_fn("reinforceplusplus", "token")(reinforce_plus_plus_advantages)
register_advantage_fn("ppo", "token", needs_values=True)(gae_advantages)
register_advantage_fn("gae", "token", needs_values=True)(gae_advantages)
