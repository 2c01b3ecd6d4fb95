"""The trainer's log-probs of the experiences kept for the dashboard's token view
(``rft_core.explorer.rollout_samples``), left in each kept experience's ``info`` by the forward
of the step that trains it, and handed back from the trainer ranks that ran it.

- ``record_sampled`` (token losses): a rollout the explorer kept (``info[SAMPLE_INFO_KEY]``)
  gets the log-prob the step's forward gives each of its response tokens
  (``info[TRAINER_LOGPROBS_KEY]``), the first epoch's only (the weights the step starts from,
  those the engine was handed).
- ``record_pairs`` (pair losses, DPO): a pair the trainer kept gets its chosen and rejected
  responses' per-token log-probs under the policy, both sides' sums under the frozen reference,
  and the pair loss's own terms for that pair alone (``info[PAIR_INFO_KEY]``).
- ``recorded_in`` / ``restore_recorded``: a ``TrainerRanks`` rank trains copies of its shard (Ray
  serializes them), so what it recorded goes back by position in the shard to the batch's own
  experiences, where the trainer that writes the ``samples`` event reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rft_core.experience import Experience
from rft_core.explorer.rollout_samples import PAIR_INFO_KEY, SAMPLE_INFO_KEY, TRAINER_LOGPROBS_KEY
from rft_core.trainer.batching import MicroBatch

RECORDED_KEYS = (TRAINER_LOGPROBS_KEY, PAIR_INFO_KEY)


def _response_values(logp: torch.Tensor, row: int, width: int, length: int) -> list[float]:
    """Row ``row``'s log-probs of its ``length`` response tokens (right-aligned in ``width``)."""
    values = logp[row, width - length :] if length else logp[row, :0]
    return values.detach().float().cpu().tolist()


def record_sampled(experiences: list[Experience], mb: MicroBatch, logp: torch.Tensor) -> None:
    """``logp`` ([B, R], the micro-batch's forward) of each kept rollout among ``mb``'s rows
    into its ``info`` (module docstring); a row recorded before (an earlier epoch) keeps it."""
    if mb.padding:
        return
    for b, row in enumerate(mb.rows):
        exp = experiences[row]
        if SAMPLE_INFO_KEY in exp.info and TRAINER_LOGPROBS_KEY not in exp.info:
            n = len(exp.response_ids)
            exp.info[TRAINER_LOGPROBS_KEY] = _response_values(logp, b, mb.response_width, n)


def record_pairs(
    experiences: list[Experience],
    pairs: list[int],
    mb: MicroBatch,
    logp: torch.Tensor,
    logp_sums: torch.Tensor,
    ref_sums: torch.Tensor,
    pair_terms: Callable[..., dict[str, float]],
) -> None:
    """For each kept pair among ``pairs`` (the micro-batch's chosen rows, then its rejected rows
    in the same order): the per-token ``logp`` of both responses, the reference's sums
    ``ref_sums`` [2P], and the pair loss's terms of that pair alone: ``pair_terms`` of its
    (chosen, rejected, reference chosen, reference rejected) sums, each of shape [1]."""
    p = len(pairs)
    sums = logp_sums.detach()
    for b, row in enumerate(pairs):
        exp = experiences[row]
        if SAMPLE_INFO_KEY not in exp.info or PAIR_INFO_KEY in exp.info:
            continue
        width = mb.response_width
        c, r = [b], [p + b]
        exp.info[PAIR_INFO_KEY] = {
            "chosen": _response_values(logp, b, width, len(exp.response_ids)),
            "rejected": _response_values(logp, p + b, width, len(exp.rejected_ids)),
            "reference_sums": {"chosen": float(ref_sums[b]), "rejected": float(ref_sums[p + b])},
            "terms": {
                k: float(v)
                for k, v in pair_terms(sums[c], sums[r], ref_sums[c], ref_sums[r]).items()
            },
        }


def recorded_in(shard: list[Experience]) -> dict[int, dict[str, Any]]:
    """What the step recorded in ``shard``'s experiences, by position in the shard."""
    recorded = {}
    for j, exp in enumerate(shard):
        values = {k: exp.info[k] for k in RECORDED_KEYS if k in exp.info}
        if values:
            recorded[j] = values
    return recorded


def restore_recorded(shard: list[Experience], recorded: dict[int, dict[str, Any]]) -> None:
    """``recorded_in``'s answer from a rank's copy of ``shard`` put into ``shard`` itself."""
    for j, values in recorded.items():
        shard[j].info.update(values)
