"""Experiences → padded tensors for the trainer, in the layout that makes the forward cheap.

Sequences are LEFT-padded (as in the hf rollout engine, with the same ``position_ids``), so
every row's response ends at the last column. The model is then asked only for the logits of
the last ``R + 1`` positions (``logits_to_keep``), ``R`` being the longest response of the
micro-batch: prompt logits are never computed. Per-token tensors (log-probs, advantages,
masks) are [B, R] with each response right-aligned.

SHARED PREFIX. The responses of a GRPO group share one prompt. When prompts repeat in a
micro-batch, ``collate`` also builds a ``SharedPrefix`` layout: each distinct prompt minus its
last token is LEFT-padded once ([U, P]); its KV cache is expanded to the rows; each row then
runs ``last prompt token + response``, LEFT-padded to ``W + 1`` columns, on top of it. That is
exactly the tail the plain layout asks logits for, so both layouts give the same right-aligned
per-token tensors. A row's padding sits between its prefix and its response, so its attention
mask is its prefix mask followed by its response mask, and its position ids continue from the
prompt. On a CPU the rows are cut into a few ``ResponseBlock``s of similar response length
(``W`` is each block's longest), since there compute follows padded tokens. Which layout runs
is the trainer's choice (``rft_core.trainer.forward``); the plain tensors are always there (the
critic uses them).

PACKED ROWS (``use_remove_padding``, verl's name). ``collate(pack=True)`` also lays the rows
out padding-free: concatenated into one [1, T] sequence whose ``position_ids`` restart at 0 at
each row, with no attention mask. transformers' mask builder reads a packed batch from exactly
that (``masking_utils.find_packed_sequence_indices``: a position that is not its predecessor + 1
starts a sequence) and keeps attention within each row, for every attention implementation
(``sdpa``/``eager`` by a block-diagonal mask, flash and flex by their varlen/block forms). Only the
positions predicting response tokens are asked for (``logits_to_keep`` as an index tensor); their
results are scattered back into the right-aligned [B, R] layout.

Micro-batches are cut from the batch sorted by length, so rows of similar length pad together;
each micro-batch is padded to its own longest row, never to ``max_model_len``. ``loss_weight``
scales a micro-batch's aggregated loss so that the accumulated gradient equals the one of the
whole batch under every ``loss_agg_mode``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rft_core.experience import Experience


@dataclass
class ResponseBlock:
    """Rows of a micro-batch that run together on top of their (expanded) prefixes."""

    rows: list[int]  # positions in the micro-batch
    prefix_of_row: torch.Tensor  # [b] long: which of the U prefixes each row extends
    input_ids: torch.Tensor  # [b, W + 1] last prompt token + response, left-padded
    attention_mask: torch.Tensor  # [b, P + W + 1]: the row's prefix mask, then its block's
    position_ids: torch.Tensor  # [b, W + 1]

    @property
    def response_width(self) -> int:
        return self.input_ids.shape[1] - 1


@dataclass
class SharedPrefix:
    """The micro-batch with each distinct prompt computed once (see the module docstring)."""

    input_ids: torch.Tensor  # [U, P] distinct prompts without their last token, left-padded
    attention_mask: torch.Tensor  # [U, P]
    position_ids: torch.Tensor  # [U, P]
    blocks: list[ResponseBlock]  # one, or (CPU) a few of rows with similar response lengths


@dataclass
class PackedRows:
    """The micro-batch's rows without padding, one after another (see the module docstring)."""

    input_ids: torch.Tensor  # [1, T] every row's prompt + response, T = their total length
    position_ids: torch.Tensor  # [1, T] restarting at 0 at each row
    logits_index: torch.Tensor  # [N] positions of T that predict a response token
    targets: torch.Tensor  # [1, N] the response tokens they predict
    slot: torch.Tensor  # [N] where each lands in the flattened [B * R] right-aligned layout


@dataclass
class MicroBatch:
    rows: list[int]  # indices into the step's experience list
    input_ids: torch.Tensor  # [B, S] left-padded
    attention_mask: torch.Tensor  # [B, S]
    position_ids: torch.Tensor  # [B, S]
    targets: torch.Tensor  # [B, R] the response tokens (right-aligned; pad elsewhere)
    mask: torch.Tensor  # [B, R] float: 1 on trained response tokens
    shared_prefix: SharedPrefix | None = None  # when prompts repeat and sharing saves tokens
    packed: PackedRows | None = None  # padding-free layout, when asked for
    # an all-masked stand-in that keeps a rank's collective calls in step with the others'
    padding: bool = False

    @property
    def response_width(self) -> int:
        return self.targets.shape[1]


def is_trained(experience: Experience) -> bool:
    """False for an experience whose every response token is masked: a group the advantage fn
    filtered out, or a trainer rank's stand-in (``trainer/ranks.py``). Such rows count in no
    mean (rows, rewards, lengths), as if they had been dropped."""
    return not experience.action_mask or any(experience.action_mask)


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
    *,
    pack: bool = False,
) -> MicroBatch:
    """Left-pad ``(prompt_ids, response_ids, action_mask)`` triples into one micro-batch, and
    (``pack``) lay them out padding-free too."""
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
        shared_prefix=shared_prefix(sequences, width, pad_token_id, device),
        packed=packed_rows(sequences, width, device) if pack else None,
    )


def packed_rows(
    sequences: Sequence[tuple[list[int], list[int], list[int]]],
    width: int,
    device: torch.device,
) -> PackedRows | None:
    """The padding-free layout of ``sequences`` (responses right-aligned in ``width``
    columns), or None when a prompt is empty (its first response token has no predictor)."""
    if any(not prompt for prompt, _, _ in sequences):
        return None
    ids: list[int] = []
    positions: list[int] = []
    index: list[int] = []
    slot: list[int] = []
    for row, (prompt, response, _) in enumerate(sequences):
        start = len(ids) + len(prompt) - 1  # the last prompt token predicts the first response
        index.extend(range(start, start + len(response)))
        first = row * width + width - len(response)
        slot.extend(range(first, first + len(response)))
        ids.extend(prompt + response)
        positions.extend(range(len(prompt) + len(response)))
    return PackedRows(
        input_ids=torch.tensor([ids], dtype=torch.long, device=device),
        position_ids=torch.tensor([positions], dtype=torch.long, device=device),
        logits_index=torch.tensor(index, dtype=torch.long, device=device),
        targets=torch.tensor([[ids[i + 1] for i in index]], dtype=torch.long, device=device),
        slot=torch.tensor(slot, dtype=torch.long, device=device),
    )


def shared_prefix(
    sequences: Sequence[tuple[list[int], list[int], list[int]]],
    width: int,
    pad_token_id: int,
    device: torch.device,
) -> SharedPrefix | None:
    """The shared-prefix layout of ``sequences`` (responses padded to ``width``), or None when
    no prompt repeats, a prompt is a single token, or it would not run fewer padded tokens."""
    index: dict[tuple[int, ...], int] = {}
    prefix_of_row = []
    for prompt, _, _ in sequences:
        if len(prompt) < 2:
            return None
        prefix_of_row.append(index.setdefault(tuple(prompt[:-1]), len(index)))
    batch, distinct = len(sequences), len(index)
    prefix_len = max(len(p) for p in index)
    plain_tokens = batch * max(len(p) + len(r) for p, r, _ in sequences)
    if distinct == batch or distinct * prefix_len + batch * (width + 1) >= plain_tokens:
        return None
    input_ids = torch.full((distinct, prefix_len), pad_token_id, dtype=torch.long)
    attention = torch.zeros((distinct, prefix_len), dtype=torch.long)
    for u, prefix in enumerate(index):
        input_ids[u, prefix_len - len(prefix) :] = torch.tensor(prefix, dtype=torch.long)
        attention[u, prefix_len - len(prefix) :] = 1
    # on a CPU compute follows the padded token count, so rows of much shorter responses run
    # as a block of their own; on a GPU padding is cheap next to another forward's overhead
    lengths = [len(r) for _, r, _ in sequences]
    groups = response_blocks(lengths, max_blocks=4 if device.type == "cpu" else 1)
    blocks = []
    for rows in groups:
        block_width = max(lengths[i] for i in rows)
        ids = torch.full((len(rows), block_width + 1), pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), block_width + 1), dtype=torch.long)
        positions = torch.zeros((len(rows), block_width + 1), dtype=torch.long)
        for b, i in enumerate(rows):
            prompt, response, _ = sequences[i]
            start = block_width - len(response)
            ids[b, start:] = torch.tensor([prompt[-1], *response], dtype=torch.long)
            mask[b, start:] = 1
            # the last prompt token sits at position len(prompt) - 1, as in the plain layout
            positions[b, start:] = torch.arange(len(prompt) - 1, len(prompt) + len(response))
        prefixes = torch.tensor([prefix_of_row[i] for i in rows], dtype=torch.long)
        blocks.append(
            ResponseBlock(
                rows=rows,
                prefix_of_row=prefixes.to(device),
                input_ids=ids.to(device),
                attention_mask=torch.cat([attention[prefixes], mask], -1).to(device),
                position_ids=positions.to(device),
            )
        )
    return SharedPrefix(
        input_ids=input_ids.to(device),
        attention_mask=attention.to(device),
        position_ids=(attention.cumsum(-1) - 1).clamp(min=0).to(device),
        blocks=blocks,
    )


def response_blocks(
    lengths: Sequence[int], max_blocks: int = 4, overhead_tokens: int = 64
) -> list[list[int]]:
    """Row indices split into at most ``max_blocks`` groups of similar response length, each
    padded to its own longest response: a split is made where it saves more padded tokens than
    ``overhead_tokens`` (the cost of one more forward). One group keeps the rows' order."""
    if max_blocks <= 1:
        return [list(range(len(lengths)))]
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    spans = [(0, len(order))]  # [start, end) in ``order``; a span pads to its first row
    while len(spans) < max_blocks:
        best_saving, best = float(overhead_tokens), None
        for k, (start, end) in enumerate(spans):
            head = lengths[order[start]] + 1
            for cut in range(start + 1, end):
                saving = (end - cut) * (head - lengths[order[cut]] - 1)
                if saving > best_saving:
                    best_saving, best = saving, (k, cut)
        if best is None:
            break
        k, cut = best
        start, end = spans[k]
        spans[k : k + 1] = [(start, cut), (cut, end)]
    if len(spans) == 1:
        return [list(range(len(lengths)))]
    return [order[start:end] for start, end in spans]


def right_aligned(values: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    """Per-token lists → [B, width] float tensor, each row right-aligned, zeros before."""
    out = torch.zeros((len(values), width), dtype=torch.float32)
    for i, row in enumerate(values):
        if row:
            out[i, width - len(row) :] = torch.tensor(list(row)[-width:], dtype=torch.float32)
    return out


def micro_batches(
    lengths: Sequence[int],
    micro_batch_size: int | None,
    max_tokens: int | None = None,
    *,
    packed: bool = False,
) -> list[list[int]]:
    """Row indices grouped into micro-batches of similar total length (longest first): at most
    ``micro_batch_size`` rows, and at most ``max_tokens`` tokens when that is given
    (``trainer.max_token_len_per_gpu``): padded tokens (rows x longest row), or with
    ``packed`` the rows' own tokens. A row longer than ``max_tokens`` runs alone."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    size = micro_batch_size or len(order) or 1
    groups: list[list[int]] = []
    tokens = 0
    for i in order:
        group = groups[-1] if groups else None
        fits = group is not None and len(group) < size
        if fits and max_tokens:
            # rows are sorted longest first, so the group's first row sets its padded length
            cost = lengths[i] if packed else lengths[group[0]]
            fits = tokens + cost <= max_tokens
        if fits:
            group.append(i)
            tokens += lengths[i] if packed else lengths[group[0]]
        else:
            groups.append([i])
            tokens = lengths[i]
    return groups


def split_to_count(groups: list[list[int]], count: int) -> tuple[list[list[int]], int]:
    """Micro-batch row groups split (largest first, in halves) until there are ``count``;
    returns them and how many padding micro-batches are still missing (too few rows)."""
    groups = [list(g) for g in groups]
    while len(groups) < count:
        largest = max(range(len(groups)), key=lambda i: len(groups[i]))
        if len(groups[largest]) < 2:
            break
        rows = groups.pop(largest)
        groups[largest:largest] = [rows[: len(rows) // 2], rows[len(rows) // 2 :]]
    return groups, count - len(groups)


def padding_micro_batch(mb: MicroBatch) -> MicroBatch:
    """A copy of ``mb``'s first row with every token masked: it runs the same forward and
    backward calls as a real micro-batch and contributes nothing."""
    first = slice(0, 1)
    return MicroBatch(
        rows=mb.rows[:1],
        input_ids=mb.input_ids[first],
        attention_mask=mb.attention_mask[first],
        position_ids=mb.position_ids[first],
        targets=mb.targets[first],
        mask=torch.zeros_like(mb.mask[first]),
        padding=True,
    )


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
