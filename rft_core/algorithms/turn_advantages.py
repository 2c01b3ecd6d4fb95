"""Advantage functions over the turns of multi-turn episodes, where each turn is an experience
(step-wise workflows): ``step_wise_grpo`` (algorithm_type ``multi_step_grpo``) and ``gigpo``; plus
``raft``'s reward filter and ``clipb``'s sequence part, group functions of the usual kind.

Reproduced from Trinity-RFT (agentscope-ai/Trinity-RFT), never copied:

- ``trinity/algorithm/advantage_fn/multi_step_grpo_advantage.py`` (``StepWiseGRPOAdvantageFn``):
  within each task group, one GRPO score per episode from its LAST turn's reward, broadcast to
  every turn of the episode;
- ``trinity/algorithm/advantage_fn/gigpo_advantage.py`` (``GiGPOAdvantageFn``, Feng et al. 2025,
  arXiv 2505.10978): ``A = A_E(episode) + omega · A_S(turn | anchor state)``;
- ``trinity/algorithm/advantage_fn/clipb_advantage.py`` (``ClipBAdvantageFn``): GRPO on the
  sequence reward; its token filter is the trainer's (``rft_core.trainer.step_masks``);
- ``trinity/algorithm/algorithm.py`` (``RAFTAlgorithm``): SFT on the explorer's rollouts; Trinity's
  RAFT workflows keep the successful ones, here ``raft`` keeps those whose reward reaches
  ``reward_threshold`` whatever the workflow.

A turn-level function takes ``turns`` (one :class:`Turn` per experience, :func:`turns_of`); the
registry hands them over to entries registered with ``needs_turns=True``. An experience without
turn information (a single-turn workflow) is an episode of one turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rft_core.algorithms.advantages import (
    _check_batch,
    _exact,
    _group_indices,
    grpo_advantages,
    register_advantage_fn,
)
from rft_core.errors import ConfigError


@dataclass(frozen=True)
class Turn:
    """Where an experience sits in its episode."""

    run_id: str  # the episode (unique within its group)
    step: int  # the turn's index in the episode, from 0
    step_reward: float | None = None  # the turn's own reward (gigpo); None: sparse
    state: str | None = None  # the environment's state before the turn (gigpo's anchor)


def turns_of(experiences: Sequence[Any]) -> list[Turn]:
    """One :class:`Turn` per experience from ``info`` (``run_id``, ``step``, ``step_reward``,
    ``env_state_hash``, as the step-wise workflows write them); without ``run_id`` an
    experience is an episode of its own."""
    turns = []
    for i, exp in enumerate(experiences):
        info = getattr(exp, "info", None) or {}
        reward = info.get("step_reward")
        state = info.get("env_state_hash")
        turns.append(
            Turn(
                run_id=str(info.get("run_id", f"#{i}")),
                step=int(info.get("step", 0)),
                step_reward=None if reward is None else float(reward),
                state=None if state is None else str(state),
            )
        )
    return turns


def _check_turns(turns: Sequence[Turn] | None, n: int) -> Sequence[Turn]:
    if turns is None:
        return [Turn(run_id=f"#{i}", step=0) for i in range(n)]
    if len(turns) != n:
        raise ValueError(f"got {len(turns)} turns for {n} experiences")
    return turns


def _runs(idx: list[int], turns: Sequence[Turn]) -> dict[str, list[int]]:
    """A group's experiences by episode, each episode's in turn order."""
    runs: dict[str, list[int]] = {}
    for i in idx:
        runs.setdefault(turns[i].run_id, []).append(i)
    return {rid: sorted(rows, key=lambda i: turns[i].step) for rid, rows in runs.items()}


def step_wise_grpo_advantages(
    rewards: torch.Tensor,
    group_ids: Sequence[str],
    *,
    turns: Sequence[Turn] | None = None,
    epsilon: float = 1e-6,
    enable_step_norm: bool = False,
    std_cal_level: str = "group",
    std_threshold: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step-wise GRPO: in each group (task), the episodes' rewards are their last turns';
    ``score = (r - mean) / (std + epsilon)`` over the group's episodes (unbiased std; of every
    episode of the batch with ``std_cal_level="batch"``; no division with ``"none"``), and every
    turn of an episode gets its episode's score (divided by its number of turns with
    ``enable_step_norm``). A group of one episode has mean 0 and std 1. With ``std_threshold``,
    a group of one episode or of reward std <= it is dropped (``keep`` False).
    Returns ``(advantages[B], keep[B])``."""
    _check_batch(rewards, group_ids)
    if std_cal_level not in ("group", "batch", "none"):
        raise ConfigError(
            "algorithm.advantage_fn_args.std_cal_level",
            f"must be 'group', 'batch' or 'none', got {std_cal_level!r}",
            value=std_cal_level,
            allowed=["group", "batch", "none"],
        )
    turns = _check_turns(turns, len(group_ids))
    rewards = _exact(rewards)
    groups = {gid: _runs(idx, turns) for gid, idx in _group_indices(group_ids).items()}
    last = [rows[-1] for runs in groups.values() for rows in runs.values()]
    batch_std = rewards[last].std() if len(last) > 1 else torch.tensor(1.0, dtype=rewards.dtype)
    advantages = torch.zeros_like(rewards)
    keep = torch.ones_like(rewards, dtype=torch.bool)
    for runs in groups.values():
        finals = rewards[[rows[-1] for rows in runs.values()]]
        if len(runs) == 1:
            mean, std = (
                torch.tensor(0.0, dtype=rewards.dtype),
                torch.tensor(1.0, dtype=rewards.dtype),
            )
        else:
            mean, std = finals.mean(), finals.std()
        if std_threshold is not None and (len(runs) == 1 or std <= std_threshold):
            for rows in runs.values():
                keep[rows] = False
            continue
        for rows, final in zip(runs.values(), finals, strict=True):
            if std_cal_level == "none":
                score = final - mean
            else:
                score = (final - mean) / (
                    (batch_std if std_cal_level == "batch" else std) + epsilon
                )
            advantages[rows] = score / len(rows) if enable_step_norm else score
    return advantages.float(), keep


def _gigpo_normalize(values: torch.Tensor, fnorm: str, epsilon: float) -> torch.Tensor:
    """``(v - mean) / (d + epsilon)``, ``d`` the unbiased std (``fnorm="std"``) or 1; one value
    has mean 0 and d 1 (GiGPO's normalization of a group)."""
    if values.numel() == 1:
        return values / (1.0 + epsilon)
    denom = values.std() if fnorm == "std" else torch.tensor(1.0, dtype=values.dtype)
    return (values - values.mean()) / (denom + epsilon)


def gigpo_advantages(
    rewards: torch.Tensor,
    group_ids: Sequence[str],
    *,
    turns: Sequence[Turn] | None = None,
    omega: float = 1.0,
    gamma: float = 1.0,
    fnorm: str = "none",
    epsilon: float = 1e-6,
) -> torch.Tensor:
    """GiGPO (Feng et al. 2025): ``A = A_E + omega · A_S`` for every turn.

    Each turn's reward ``r_t`` is its ``step_reward`` where the episode has any, else 0 but on
    the last turn, which gets the experience's reward (sparse outcome). ``R_t`` is the
    discounted return ``sum_k>=t gamma^(k-t) r_k``. ``A_E``: the episode returns ``sum_t r_t``
    normalized within the task group (``_gigpo_normalize``). ``A_S``: turns of the whole batch
    that start from the same anchor state (``Turn.state``) form a step group; in a step group of
    two or more, the turns' ``R_t`` normalized; 0 elsewhere and for turns without a state."""
    _check_batch(rewards, group_ids)
    if fnorm not in ("std", "none"):
        raise ConfigError(
            "algorithm.advantage_fn_args.fnorm",
            f"must be 'std' or 'none', got {fnorm!r}",
            value=fnorm,
            allowed=["std", "none"],
        )
    turns = _check_turns(turns, len(group_ids))
    rewards = _exact(rewards)
    episode_adv = torch.zeros_like(rewards)
    returns = torch.zeros_like(rewards)
    for idx in _group_indices(group_ids).values():
        runs = _runs(idx, turns)
        totals = []
        for rows in runs.values():
            dense = any(turns[i].step_reward is not None for i in rows)
            step_r = [
                (turns[i].step_reward or 0.0)
                if dense
                else (float(rewards[i]) if k == len(rows) - 1 else 0.0)
                for k, i in enumerate(rows)
            ]
            running = 0.0
            for i, r in zip(reversed(rows), reversed(step_r), strict=True):
                running = r + gamma * running
                returns[i] = running
            totals.append(sum(step_r))
        scores = _gigpo_normalize(torch.tensor(totals, dtype=rewards.dtype), fnorm, epsilon)
        for rows, score in zip(runs.values(), scores, strict=True):
            episode_adv[rows] = score
    step_adv = torch.zeros_like(rewards)
    anchors: dict[str, list[int]] = {}
    for i, turn in enumerate(turns):
        if turn.state is not None:
            anchors.setdefault(turn.state, []).append(i)
    for members in anchors.values():
        if len(members) > 1:
            step_adv[members] = _gigpo_normalize(returns[members], fnorm, epsilon)
    return (episode_adv + omega * step_adv).float()


def raft_advantages(
    rewards: torch.Tensor, group_ids: Sequence[str], *, reward_threshold: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """RAFT's filter: the rollouts whose reward is >= ``reward_threshold`` are kept (advantage
    1, unused by the SFT loss), the others dropped (``keep`` False)."""
    _check_batch(rewards, group_ids)
    keep = rewards.detach().double() >= reward_threshold
    return keep.float(), keep


def clipb_advantages(
    rewards: torch.Tensor,
    group_ids: Sequence[str],
    *,
    epsilon: float = 1e-6,
    mu: float = 2.5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clip_B's sequence part: GRPO's ``(r - mean) / (std + epsilon)`` per group (a group of one
    has mean 0, std 1, as Trinity's). ``mu`` is the trainer's token filter's
    (``rft_core.trainer.step_masks.clipb_keep``)."""
    _check_batch(rewards, group_ids)
    exact = _exact(rewards)
    advantages, keep = grpo_advantages(rewards, group_ids, epsilon=epsilon)
    for idx in _group_indices(group_ids).values():
        if len(idx) == 1:
            advantages[idx] = (exact[idx] / (1.0 + epsilon)).float()
    return advantages, keep


register_advantage_fn("step_wise_grpo", "group", needs_turns=True)(step_wise_grpo_advantages)
register_advantage_fn("gigpo", "group", needs_turns=True)(gigpo_advantages)
register_advantage_fn("raft", "group")(raft_advantages)
register_advantage_fn("clipb", "group")(clipb_advantages)
