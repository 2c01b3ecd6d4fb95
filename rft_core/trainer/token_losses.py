"""The backward pass of a token-level policy loss over a step's micro-batches: PPO-clip on
advantages (grpo, rloo, reinforceplusplus, ppo), SFT's likelihood, and the mixed losses of mix /
mix_chord (``POLICY_LOSSES`` entries with ``inputs`` "advantages", "logprobs" and "mixed").

For an advantage loss the micro-batch loss is

    policy loss (old log-probs, advantages) + kl_coef · KL(policy, ref) - entropy_coef · H

aggregated by ``algorithm.loss_agg_mode``; SFT's has the entropy term only, and SFT also
reports its token accuracy (``actor/sft_token_accuracy``: the share of response tokens that
are the model's top-1 guess, from the same forward). Micro-batch losses
are weighted (``batching.loss_weight``) so that gradient accumulation equals one pass over the
whole batch, and the critic (ppo) takes its own step over the same micro-batches.

A mixed loss gets each micro-batch's expert-row mask (``info["is_expert"]``), the trainer step
and the step's rollout/expert token and row counts, and weighs its two parts itself; the KL and
entropy terms cover the rollout rows only.

The forward of each micro-batch also leaves, in the ``info`` of each rollout the explorer kept
for the dashboard, the log-probs it gives its response tokens (``recorded_logprobs``).

Old log-probs are the rollout engine's (``Experience.logprobs``), recomputed here only for an
experience that carries none; the reference's come from the frozen reference model.
"""

from __future__ import annotations

from typing import Any

import torch

from rft_core.algorithms.aggregation import aggregate_loss, masked_mean
from rft_core.algorithms.kl import kl_loss
from rft_core.algorithms.policy_losses import PolicyLoss
from rft_core.algorithms.settings import AlgorithmSettings, accepted_args
from rft_core.experience import Experience
from rft_core.trainer.batching import MicroBatch, loss_weight, right_aligned
from rft_core.trainer.critic import Critic
from rft_core.trainer.forward import PolicyForward
from rft_core.trainer.metrics import add_weighted
from rft_core.trainer.recorded_logprobs import record_sampled
from rft_core.trainer.step_masks import step_token_masks
from rft_core.trainer.token_advantages import step_advantages


def token_losses_backward(
    experiences: list[Experience],
    loss: PolicyLoss,
    algo: AlgorithmSettings,
    forward: PolicyForward,
    *,
    model: Any,
    ref_model: Any | None,
    critic: Critic | None,
    loss_horizon: int | None,
    global_step: int = 0,
) -> tuple[dict[str, float], bool]:
    """Gradients of ``loss`` over ``experiences`` accumulated in ``model`` (and the critic's
    step); returns the metrics and whether any token was trained (the same on every rank)."""
    ranks = forward.ranks
    mbs = forward.micro_batches(experiences)
    # seq-mean-token-sum-norm's constant divisor (model.max_response_tokens); None: the
    # longest response of the batch (of every rank's)
    horizon = loss_horizon or max(mb.response_width for mb in mbs)
    if not loss_horizon:
        horizon = int(ranks.largest(horizon))
    total_tokens, total_rows = ranks.total(
        float(sum(mb.mask.sum() for mb in mbs)), _trained_rows(experiences, mbs)
    )
    metrics: dict[str, float] = {}
    mixed = loss.inputs == "mixed"  # mix, mix_chord: expert SFT rows among the rollouts
    on_advantages = loss.inputs in ("advantages", "mixed")
    likelihood = loss.inputs == "logprobs"  # sft
    old: list[torch.Tensor] = []
    ref: list[torch.Tensor | None] = []
    extra: list[dict[str, Any]] = [{} for _ in mbs]
    critic_inputs: list[Any] = [None] * len(mbs)
    if on_advantages:
        old, ref = _old_and_reference_logprobs(experiences, mbs, forward, model, ref_model)
        advantages, critic_inputs = step_advantages(
            algo, experiences, mbs, old, ref, ranks, critic, metrics
        )
        # m2po's mask, Clip_B's filter: over the whole step, from the current policy
        extra, mask_metrics = step_token_masks(
            algo, loss.name, mbs, old, advantages, forward, model
        )
        metrics.update(mask_metrics)
        # std_threshold may drop rows, Clip_B tokens
        total_tokens, total_rows = ranks.total(
            float(sum(mb.mask.sum() for mb in mbs)), _trained_rows(experiences, mbs)
        )
        adv_sum = sum(float((a * mb.mask).sum()) for a, mb in zip(advantages, mbs, strict=True))
        metrics["critic/advantages/mean"] = adv_sum / max(total_tokens, 1.0)
    args = accepted_args(loss.fn, algo.policy_loss_args, "algorithm.policy_loss_fn_args")
    mode = algo.loss_agg_mode
    if mixed:
        expert_rows, mixed_totals = _expert_rows(experiences, mbs, ranks)
        args = {**args, "step": global_step, **mixed_totals}
    sums: dict[str, float] = {}
    weights = []
    for k, mb in enumerate(mbs):
        weight = 0.0 if mb.padding else loss_weight(mode, mb.mask, total_tokens, total_rows)
        share = float(mb.mask.sum()) / max(total_tokens, 1.0)  # for token-level metrics
        weights.append(weight)
        # KL and entropy terms: over every row, or (mixed) over the rollout rows only, as
        # Trinity's mix entropy; the mixed loss weighs its parts itself (its *_totals)
        term_mask, term_weight, loss_scale = mb.mask, weight, weight
        entropy_bonus = algo.entropy_coef > 0
        scores = forward.token_scores(
            model, mb, entropy=True, entropy_grad=entropy_bonus, top1=likelihood
        )
        logp, entropy = scores[..., 0], scores[..., 1]
        if likelihood:  # SFT: how often the response token is the model's top-1 guess
            accuracy = float(masked_mean(scores[..., 2].detach(), mb.mask))
            add_weighted(sums, "actor/sft_token_accuracy", accuracy, share)
        record_sampled(experiences, mb, logp)
        if mixed:
            expert = expert_rows[k].to(mb.mask.device)
            term_mask = mb.mask * (~expert).unsqueeze(-1).to(mb.mask.dtype)
            usual_tokens, usual_rows = mixed_totals["usual_totals"]
            term_weight = (
                0.0
                if mb.padding
                else loss_weight(mode, term_mask[~expert], usual_tokens, int(usual_rows))
            )
            loss_scale = 0.0 if mb.padding else 1.0
            mb_loss, m = loss.fn(
                logp, old[k], advantages[k], mb.mask, expert, loss_agg_mode=mode,
                horizon=horizon, **args,
            )  # fmt: skip
            for name, value in m.items():  # come weighted by each part's share
                if name == "mu":  # one value: its shares add up to it
                    add_weighted(sums, "actor/mu", value, share)
                else:
                    add_weighted(sums, f"actor/{name}", value, loss_scale)
        elif on_advantages:
            mb_loss, m = loss.fn(
                logp, old[k], advantages[k], mb.mask, loss_agg_mode=mode, horizon=horizon,
                **args, **extra[k],
            )  # fmt: skip
        else:
            mb_loss, m = loss.fn(logp, mb.mask, mode, horizon=horizon, **args)
        if not mixed:
            for name, value in m.items():  # losses average as the loss does, the rest per token
                add_weighted(
                    sums, f"actor/{name}", value, weight if name.endswith("_loss") else share
                )
        if on_advantages and algo.uses_kl_loss:
            kl, km = kl_loss(logp, ref[k], term_mask, algo.kl_loss_fn, mode, horizon=horizon)
            mb_loss = mb_loss + algo.kl_coef * kl * (term_weight if mixed else 1.0)
            add_weighted(sums, "actor/kl_loss", km["kl_loss"], term_weight)
            add_weighted(sums, "actor/kl_coef", algo.kl_coef, share)
        if entropy_bonus:
            bonus = algo.entropy_coef * aggregate_loss(entropy, term_mask, mode, horizon=horizon)
            mb_loss = mb_loss - bonus * (term_weight if mixed else 1.0)
        entropy = entropy.detach()
        add_weighted(sums, "actor/entropy", float(masked_mean(entropy, mb.mask)), share)
        # FSDP2 averages gradients over the ranks; each rank's weight is its global share
        (mb_loss * (loss_scale * ranks.world_size)).backward()
    metrics.update(sums)
    if critic is not None and on_advantages:
        metrics.update(
            critic.update(
                mbs,
                [c[0] for c in critic_inputs],
                [c[1] for c in critic_inputs],
                weights,
                mode,
                horizon,
            )
        )
    return metrics, total_tokens > 0


def _old_and_reference_logprobs(
    experiences: list[Experience],
    mbs: list[MicroBatch],
    forward: PolicyForward,
    model: Any,
    ref_model: Any | None,
) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """Each micro-batch's [B, R] old log-probs (the engine's, or recomputed) and reference
    log-probs (None without a reference model)."""
    ranks = forward.ranks
    recompute = {
        id(mb)
        for mb in mbs
        if any(len(experiences[i].logprobs) != len(experiences[i].response_ids) for i in mb.rows)
    }
    # sharded ranks run the forward together (FSDP collectives) when any of them needs it; each
    # keeps the engine's log-probs where it has them
    forward_all = ranks.sharded and ranks.largest(len(recompute))
    old: list[torch.Tensor] = []
    ref: list[torch.Tensor | None] = []
    with torch.no_grad():
        if recompute or forward_all:
            model.eval()
        for mb in mbs:
            needed = id(mb) in recompute
            logp = forward.logprobs(model, mb)[0] if needed or forward_all else None
            old.append(_old_logprobs(experiences, mb, logp if needed else None, forward.device))
            ref.append(forward.logprobs(ref_model, mb)[0] if ref_model is not None else None)
    model.train()
    return old, ref


def _old_logprobs(
    experiences: list[Experience],
    mb: MicroBatch,
    recomputed: torch.Tensor | None,
    device: torch.device,
) -> torch.Tensor:
    """[B, R] old log-probs: the rollout engine's for each row that carries them, the
    recomputed ones for a row that does not (row by row, so that neither the micro-batch
    layout nor the number of ranks changes which rows keep the engine's)."""
    rows = [experiences[i] for i in mb.rows]
    given = [e.logprobs if len(e.logprobs) == len(e.response_ids) else [] for e in rows]
    engine = right_aligned(given, mb.response_width).to(device)
    if recomputed is None:
        return engine
    has = torch.tensor([bool(g) or not e.response_ids for g, e in zip(given, rows, strict=True)])
    return torch.where(has.to(device).unsqueeze(-1), engine, recomputed)


def _expert_rows(
    experiences: list[Experience], mbs: list[MicroBatch], ranks: Any
) -> tuple[list[torch.Tensor], dict[str, tuple[float, int]]]:
    """Each micro-batch's [B] mask of expert rows (``info["is_expert"]``, set by the trainer's
    mix sampling), and the step's ``usual_totals`` / ``expert_totals`` (tokens, rows) over
    every rank, the denominators of each part's mean."""
    masks: list[torch.Tensor] = []
    counts = [0.0, 0.0, 0.0, 0.0]  # usual tokens, usual rows, expert tokens, expert rows
    for mb in mbs:
        flags = [bool(experiences[i].info.get("is_expert")) for i in mb.rows]
        if len(flags) != mb.mask.shape[0]:  # a padding micro-batch's stand-in rows
            flags = [False] * mb.mask.shape[0]
        expert = torch.tensor(flags, dtype=torch.bool)
        masks.append(expert)
        if mb.padding:
            continue
        tokens = mb.mask.sum(-1).cpu()
        counts[0] += float(tokens[~expert].sum())
        counts[1] += float((~expert).sum())
        counts[2] += float(tokens[expert].sum())
        counts[3] += float(expert.sum())
    usual_tokens, usual_rows, expert_tokens, expert_rows = ranks.total(*counts)
    totals = {
        "usual_totals": (usual_tokens, int(usual_rows)),
        "expert_totals": (expert_tokens, int(expert_rows)),
    }
    return masks, totals


def _trained_rows(experiences: list[Experience], mbs: list[MicroBatch]) -> int:
    """Rows the seq-mean losses average over: all but those whose every token is masked (a
    response of no tokens still counts, as one row of loss 0)."""
    return sum(
        1
        for mb in mbs
        if not mb.padding
        for b, row in enumerate(mb.rows)
        if not experiences[row].response_ids or float(mb.mask[b].sum()) > 0
    )
