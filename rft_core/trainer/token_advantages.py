"""The advantages a trainer step trains on, per micro-batch as [B, R] token tensors.

Where they come from is the algorithm's choice (``AlgorithmSettings.advantages_in_explorer``):

- a group fn (grpo, rloo) runs in the explorer, on the raw rewards: the trainer broadcasts each
  experience's ``Experience.advantage`` to its tokens as it arrives. Only experiences that carry
  none (data that never passed an explorer) get it here, from the same registry function;
- a group fn over KL-penalized rewards (rloo with ``kl_penalty_fn``, as Trinity computes rloo
  in the trainer) runs here: each response's reward minus ``kl_coef`` × its summed token KL
  (old vs reference log-probs), then the group fn;
- a token-level fn (reinforceplusplus, ppo/gae) runs here over the whole batch, on token
  rewards (the outcome reward on the last token) with the KL penalty subtracted per token;
  ppo/gae also reads the critic's values and hands back the returns the critic trains on.
"""

from __future__ import annotations

import inspect

import torch

from rft_core.algorithms import advantages as adv
from rft_core.algorithms.kl import apply_kl_penalty, kl_penalized_rewards
from rft_core.algorithms.settings import AlgorithmSettings, accepted_args
from rft_core.algorithms.turn_advantages import turns_of
from rft_core.errors import ConfigError
from rft_core.experience import Experience
from rft_core.trainer.batching import MicroBatch
from rft_core.trainer.collectives import StepRanks, sum_tensor_across_ranks
from rft_core.trainer.critic import Critic

CriticInputs = tuple[torch.Tensor, torch.Tensor] | None  # (old values, returns) of a micro-batch


def step_advantages(
    algo: AlgorithmSettings,
    experiences: list[Experience],
    mbs: list[MicroBatch],
    old: list[torch.Tensor],
    ref: list[torch.Tensor | None],
    ranks: StepRanks,
    critic: Critic | None,
    metrics: dict[str, float],
) -> tuple[list[torch.Tensor], list[CriticInputs]]:
    """Per-micro-batch [B, R] advantages and (ppo/gae) critic inputs; ``old``/``ref`` are each
    micro-batch's old and reference log-probs. A group fn's ``keep`` (std_threshold) masks the
    dropped rows in ``mb.mask``; the KL penalty's mean goes to ``metrics``."""
    fn = adv.get_advantage_fn(algo.advantage_fn) if algo.advantage_fn else None
    rewards = torch.tensor([e.reward for e in experiences], dtype=torch.float32)
    if fn is None or fn.level == "group":
        in_trainer = fn is not None and not algo.advantages_in_explorer  # KL-penalized rewards
        if not in_trainer and all(e.advantage is not None for e in experiences):
            given = torch.tensor([float(e.advantage) for e in experiences])
            return _broadcast(given, None, mbs, ranks.device), [None] * len(mbs)
        if fn is None:
            raise ConfigError(
                "algorithm.advantage_fn",
                "experiences carry no advantage and no advantage_fn is set",
            )
        if algo.uses_kl_penalty:
            rewards = _kl_penalized_rewards(algo, rewards, mbs, old, ref, ranks, metrics)
        args = accepted_args(fn.fn, algo.advantage_args, "algorithm.advantage_fn_args")
        group_ids = [e.group_id for e in experiences]
        seq_adv, keep = fn.group(rewards, group_ids, turns=turns_of(experiences), **args)
        return _broadcast(seq_adv, keep, mbs, ranks.device), [None] * len(mbs)
    # token-level: the whole batch in one right-aligned [N, R] layout
    width, n, device = max(mb.response_width for mb in mbs), len(experiences), ranks.device
    mask = _batch_of([mb.mask for mb in mbs], mbs, n, width, device)
    token_rewards = adv.outcome_to_token_rewards(rewards.to(device), mask)
    if algo.uses_kl_penalty:
        old_full, ref_full = (_batch_of(lp, mbs, n, width, device) for lp in (old, ref))
        token_rewards, km = apply_kl_penalty(
            token_rewards, old_full, ref_full, mask, algo.kl_penalty_fn, algo.kl_penalty_coef
        )
        local = float(mask.sum())
        (tokens,) = ranks.total(local)
        metrics["actor/kl_penalty"] = km["kl_penalty"] * local / max(tokens, 1.0)
    return _token_advantages(algo, fn, token_rewards, mask, mbs, ranks, critic)


def _broadcast(
    seq_adv: torch.Tensor, keep: torch.Tensor | None, mbs: list[MicroBatch], device: torch.device
) -> list[torch.Tensor]:
    """One advantage per response on each of its trained tokens; rows ``keep`` drops masked."""
    out = []
    for mb in mbs:
        a = seq_adv[mb.rows].to(device).unsqueeze(-1) * mb.mask
        if keep is not None:
            mb.mask = mb.mask * keep[mb.rows].to(device).float().unsqueeze(-1)
        out.append(a)
    return out


def _kl_penalized_rewards(
    algo: AlgorithmSettings,
    rewards: torch.Tensor,
    mbs: list[MicroBatch],
    old: list[torch.Tensor],
    ref: list[torch.Tensor | None],
    ranks: StepRanks,
    metrics: dict[str, float],
) -> torch.Tensor:
    """Each response's reward minus kl_coef x its summed token KL (old vs reference), for a
    group advantage fn."""
    out, kl_sum, tokens = rewards.clone(), 0.0, 0.0
    for mb, o, r in zip(mbs, old, ref, strict=True):
        if mb.padding:
            continue
        penalized, km = kl_penalized_rewards(
            rewards[mb.rows].to(o.device),
            o,
            r,
            mb.mask,
            algo.kl_penalty_fn,
            algo.kl_penalty_coef,
        )
        out[mb.rows] = penalized.cpu()
        n = float(mb.mask.sum())
        kl_sum, tokens = kl_sum + km["kl_penalty"] * n, tokens + n
    (tokens,) = ranks.total(tokens)
    metrics["actor/kl_penalty"] = kl_sum / max(tokens, 1.0)
    return out


def _token_advantages(
    algo: AlgorithmSettings,
    fn: adv.AdvantageFn,
    token_rewards: torch.Tensor,
    mask: torch.Tensor,
    mbs: list[MicroBatch],
    ranks: StepRanks,
    critic: Critic | None,
) -> tuple[list[torch.Tensor], list[CriticInputs]]:
    """A token-level fn over the [N, R] batch of token rewards; ppo/gae on the critic's values."""
    width = mask.shape[1]
    args = accepted_args(fn.fn, algo.advantage_args, "algorithm.advantage_fn_args")
    if ranks.sharded and "sum_across_ranks" in inspect.signature(fn.fn).parameters:
        args["sum_across_ranks"] = sum_tensor_across_ranks  # batch statistics of all ranks
    if not fn.needs_values:
        token_adv = fn(token_rewards, mask, **args)
        return [_rows_of(token_adv, mb, width) for mb in mbs], [None] * len(mbs)
    if critic is None:
        raise ConfigError(
            "algorithm.advantage_fn", f"{fn.name} needs a critic; use algorithm_type: ppo"
        )
    with torch.no_grad():
        per_mb = [None if mb.padding else critic.values(mb) * mb.mask for mb in mbs]
    values = _batch_of(per_mb, mbs, mask.shape[0], width, mask.device)
    token_adv, returns = fn(token_rewards, values, mask, **args)
    critic_inputs: list[CriticInputs] = [
        (_rows_of(values, mb, width), _rows_of(returns, mb, width)) for mb in mbs
    ]
    return [_rows_of(token_adv, mb, width) for mb in mbs], critic_inputs


def _batch_of(
    parts: list[torch.Tensor | None],
    mbs: list[MicroBatch],
    rows: int,
    width: int,
    device: torch.device,
) -> torch.Tensor:
    """The right-aligned [rows, width] batch tensor of per-micro-batch [B, R] ``parts``
    (padding micro-batches left out, zeros elsewhere): the inverse of ``_rows_of``."""
    out = torch.zeros(rows, width, device=device)
    for mb, part in zip(mbs, parts, strict=True):
        if not mb.padding:
            out[mb.rows, width - mb.response_width :] = part
    return out


def _rows_of(full: torch.Tensor, mb: MicroBatch, width: int) -> torch.Tensor:
    """``mb``'s rows of a right-aligned [N, width] batch tensor (zeros for padding)."""
    if mb.padding:
        return torch.zeros_like(mb.mask)
    return full[mb.rows, width - mb.response_width :]
