"""The backward pass of a preference-pair policy loss (DPO; ``POLICY_LOSSES`` entries with
``inputs`` "pairs") over a step's pairs.

Each experience holds a pair: ``response_ids`` chosen, ``rejected_ids`` rejected, after one
prompt. A micro-batch runs its chosen rows and its rejected rows together (half the micro-batch
size in pairs) under the policy and the frozen reference; the loss takes the per-pair sums of
response log-probs. Pair losses are means over pairs, weighted by each micro-batch's share of
the trained pairs of the global batch.

The forward also leaves, in the ``info`` of each pair the trainer kept for the dashboard, its
per-token log-probs and the loss's terms of that pair (``recorded_logprobs.record_pairs``).
"""

from __future__ import annotations

from typing import Any

import torch

from rft_core.algorithms.policy_losses import PolicyLoss
from rft_core.algorithms.settings import AlgorithmSettings, accepted_args
from rft_core.experience import Experience
from rft_core.trainer.batching import collate, is_trained, micro_batches
from rft_core.trainer.forward import PolicyForward
from rft_core.trainer.metrics import add_weighted
from rft_core.trainer.recorded_logprobs import record_pairs


def pair_losses_backward(
    experiences: list[Experience],
    loss: PolicyLoss,
    algo: AlgorithmSettings,
    forward: PolicyForward,
    *,
    model: Any,
    ref_model: Any,
) -> tuple[dict[str, float], bool]:
    """Gradients of ``loss`` over the pairs accumulated in ``model``; returns the metrics and
    whether any pair was trained (the same on every rank)."""
    ranks = forward.ranks
    args = accepted_args(loss.fn, algo.policy_loss_args, "algorithm.policy_loss_fn_args")
    sums: dict[str, float] = {}
    pair_lengths = [
        len(e.prompt_ids) + max(len(e.response_ids), len(e.rejected_ids)) for e in experiences
    ]
    size = max(1, (forward.micro_batch_size or len(experiences)) // 2)
    groups, padding = ranks.in_step(micro_batches(pair_lengths, size, forward.max_token_len))
    (total_rows,) = ranks.total(sum(map(is_trained, experiences)))

    def pair_terms(*pair_sums: torch.Tensor) -> dict[str, float]:
        return loss.fn(*pair_sums, **args)[1]

    for k, group in enumerate(groups + [groups[0][:1]] * padding):
        chosen = [_sequence(experiences[i], experiences[i].response_ids) for i in group]
        rejected = [_sequence(experiences[i], experiences[i].rejected_ids) for i in group]
        mb = collate(
            chosen + rejected,
            group + group,
            forward.pad_token_id,
            forward.device,
            pack=forward.pack_rows,
        )
        with torch.no_grad():
            ref_sums = (forward.logprobs(ref_model, mb)[0] * mb.mask).sum(-1)
        logp = forward.logprobs(model, mb)[0]
        logp_sums = (logp * mb.mask).sum(-1)
        p = len(group)
        pair_loss, m = loss.fn(logp_sums[:p], logp_sums[p:], ref_sums[:p], ref_sums[p:], **args)
        real = k < len(groups) and all(is_trained(experiences[i]) for i in group)
        if k < len(groups):  # not a padding micro-batch (its rows are recorded in theirs)
            record_pairs(experiences, group, mb, logp, logp_sums, ref_sums, pair_terms)
        weight = p / max(total_rows, 1) if real else 0.0  # padding: in step, no share
        (pair_loss * (weight * ranks.world_size)).backward()
        for name, value in m.items():
            add_weighted(sums, f"actor/{name}", value, weight)
    return sums, total_rows > 0


def _sequence(
    experience: Experience, response: list[int]
) -> tuple[list[int], list[int], list[int]]:
    """``(prompt_ids, response_ids, action_mask)`` of one side of a pair: every token trained."""
    return experience.prompt_ids, response, [1] * len(response)
