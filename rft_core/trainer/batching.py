"""Experiences → padded tensors for the trainer, in the layout that makes the forward cheap.

Sequences are LEFT-padded (as in the hf rollout engine, with the same ``position_ids``), so
every row's response ends at the last column. The model is then asked only for the logits of
the last ``R + 1`` positions (``logits_to_keep``), ``R`` being the longest response of the
micro-batch: prompt logits are never computed. Per-token tensors (log-probs, advantages,
masks) are [B, R] with each response right-aligned.

Micro-batches are cut from the batch sorted by length, so rows of similar length pad together;
each micro-batch is padded to its own longest row, never to ``max_model_len``. ``loss_weight``
scales a micro-batch's aggregated loss so that the accumulated gradient equals the one of the
whole batch under every ``loss_agg_mode``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rft_core.buffer.experience import Experience


@dataclass
class MicroBatch:
    rows: list[int]  # indices into the step's experience list
    input_ids: torch.Tensor  # [B, S] left-padded
    attention_mask: torch.Tensor  # [B, S]
    position_ids: torch.Tensor  # [B, S]
    targets: torch.Tensor  # [B, R] the response tokens (right-aligned; pad elsewhere)
    mask: torch.Tensor  # [B, R] float: 1 on trained response tokens

    @property
    def response_width(self) -> int:
        return self.targets.shape[1]


def response_mask(experience: Experience) -> list[int]:
    """The action mask of a response (all ones when the experience leaves it empty)."""
    n = len(experience.response_ids)
    if experience.action_mask and len(experience.action_mask) == n:
        return list(experience.action_mask)
    return [1] * n


def collate(
    sequences: Sequence[tuple[list[int], list[int], list[int]]],
    rows: list[int],
    pad_token_id: int,
    device: torch.device,
) -> MicroBatch:
    """Left-pad ``(prompt_ids, response_ids, action_mask)`` triples into one micro-batch."""
    seq_len = max(len(p) + len(r) for p, r, _ in sequences)
    width = max(1, max(len(r) for _, r, _ in sequences))
    batch = len(sequences)
    input_ids = torch.full((batch, seq_len), pad_token_id, dtype=torch.long)
    attention = torch.zeros((batch, seq_len), dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.float32)
    for i, (prompt, response, action) in enumerate(sequences):
        ids = prompt + response
        input_ids[i, seq_len - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        attention[i, seq_len - len(ids) :] = 1
        if response:
            mask[i, width - len(response) :] = torch.tensor(action, dtype=torch.float32)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    return MicroBatch(
        rows=list(rows),
        input_ids=input_ids.to(device),
        attention_mask=attention.to(device),
        position_ids=positions.to(device),
        targets=input_ids[:, seq_len - width :].to(device),
        mask=mask.to(device),
    )


def right_aligned(values: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    """Per-token lists → [B, width] float tensor, each row right-aligned, zeros before."""
    out = torch.zeros((len(values), width), dtype=torch.float32)
    for i, row in enumerate(values):
        if row:
            out[i, width - len(row) :] = torch.tensor(list(row)[-width:], dtype=torch.float32)
    return out


def micro_batches(
    lengths: Sequence[int], micro_batch_size: int | None, max_tokens: int | None = None
) -> list[list[int]]:
    """Row indices grouped into micro-batches of similar total length (longest first): at most
    ``micro_batch_size`` rows, and at most ``max_tokens`` padded tokens when that is given."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    size = micro_batch_size or len(order) or 1
    groups: list[list[int]] = []
    for i in order:
        group = groups[-1] if groups else None
        # rows are sorted longest first, so the group's first row sets its padded length
        fits = group is not None and len(group) < size
        if fits and max_tokens:
            fits = (len(group) + 1) * lengths[group[0]] <= max_tokens
        if fits:
            group.append(i)
        else:
            groups.append([i])
    return groups


def loss_weight(mode: str, mb_mask: torch.Tensor, total_tokens: float, total_rows: int) -> float:
    """Factor for a micro-batch's aggregated loss so micro-batches add up to the full batch.

    token-mean: (tokens in the micro-batch) / (tokens in the batch); seq-mean-*: rows / rows;
    seq-mean-token-sum-norm: 1 (its aggregate is a plain sum over a fixed horizon).
    """
    if mode == "token-mean":
        return float(mb_mask.sum()) / max(total_tokens, 1.0)
    if mode == "seq-mean-token-sum-norm":
        return 1.0
    return mb_mask.shape[0] / max(total_rows, 1)
