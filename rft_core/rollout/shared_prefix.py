"""Decoding several samples per prompt over one copy of the prompt's KV cache.

The hf engine samples ``n`` responses per prompt. With a plain full-attention model
(``rft_core.modeling.full_attention_cache``) each distinct prompt's keys and values are kept
once (``SharedPrefixLayer``), and each decoding step attends through
``shared_prefix_attention``: a row's query reads its prompt's keys once per run of rows that
share the prompt (``PrefixRows``: rows laid out prompt by prompt), then the row's own decoded
tokens, under one softmax, as plain attention over the concatenation would. It is registered
with transformers' ``AttentionInterface``, so the model's own attention modules call it while
the engine decodes inside ``shared_prefix_decoding``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.cache_utils import DynamicLayer
from transformers.masking_utils import AttentionMaskInterface


class SharedPrefixLayer(DynamicLayer):
    """A full-attention KV cache layer for sampling several responses per prompt: each distinct
    prompt's keys/values once ([U, H, P, D], from the prefill), and the tokens decoded after it
    per row in a buffer sized for the whole decode ([B, H, max_new, D], written in place where
    ``DynamicLayer`` would concatenate a copy of the whole cache at every token). Decoding
    attends through ``shared_prefix_attention``, which reads each prompt's keys once per step
    instead of once per sample."""

    def __init__(self, max_new: int) -> None:
        super().__init__()
        self.max_new = max_new
        self.length = 0  # decoded positions held per row
        self.prefix_keys: torch.Tensor | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.prefix_keys is None:  # the prefill: attention runs as usual
            self.prefix_keys, self.prefix_values = key_states, value_states
            return key_states, value_states
        if self.length == 0:
            shape = (key_states.shape[0], key_states.shape[1], self.max_new)
            self.key_buffer = key_states.new_empty((*shape, key_states.shape[-1]))
            self.value_buffer = value_states.new_empty((*shape, value_states.shape[-1]))
        end = self.length + key_states.shape[-2]
        if end > self.max_new:
            raise RuntimeError(f"KV cache room for {self.max_new} decoded tokens exceeded")
        self.key_buffer[:, :, self.length : end] = key_states
        self.value_buffer[:, :, self.length : end] = value_states
        self.length = end
        self.keys = self.key_buffer[:, :, :end]
        self.values = self.value_buffer[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        prefix = 0 if self.prefix_keys is None else self.prefix_keys.shape[-2]
        return prefix + self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.length:
            self.key_buffer = self.key_buffer[indices]
            self.value_buffer = self.value_buffer[indices]
            self.keys = self.key_buffer[:, :, : self.length]
            self.values = self.value_buffer[:, :, : self.length]

    def _unsupported(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("the hf engine's KV cache only grows and drops rows")

    crop = reset = reorder_cache = batch_repeat_interleave = _unsupported


@dataclass
class PrefixRows:
    """Which prompt each decoding row extends, as runs of consecutive rows (rows are laid out
    prompt by prompt and dropping finished rows keeps their order)."""

    cache: Any  # the DynamicCache of SharedPrefixLayers
    prefix_mask: torch.Tensor  # [U, P] bool: the prompts' padding
    prefix_of_row: list[int]
    run_prefix: torch.Tensor | None  # [runs] long: the prompt of each run; None: run u is prompt u
    masked_out: torch.Tensor  # [runs, 1, 1, P] bool: padding of each run's prompt
    run_of_row: torch.Tensor  # [B] long
    slot_of_row: torch.Tensor  # [B] long: the row's place within its run
    longest_run: int
    grid: bool  # every run holds ``longest_run`` rows: rows → runs is a reshape

    @classmethod
    def of(cls, cache: Any, prefix_mask: torch.Tensor, prefix_of_row: list[int]) -> PrefixRows:
        runs: list[int] = []
        run_of_row, slot_of_row, slot = [], [], 0
        for i, prefix in enumerate(prefix_of_row):
            if i == 0 or prefix != prefix_of_row[i - 1]:
                runs.append(prefix)
                slot = 0
            run_of_row.append(len(runs) - 1)
            slot_of_row.append(slot)
            slot += 1
        device = prefix_mask.device
        run_prefix = None if runs == list(range(len(prefix_mask))) else torch.tensor(runs)
        if run_prefix is not None:
            run_prefix = run_prefix.to(device)
        longest = max(slot_of_row) + 1
        return cls(
            cache,
            prefix_mask,
            list(prefix_of_row),
            run_prefix,
            ~(prefix_mask if run_prefix is None else prefix_mask[run_prefix])[:, None, None, :],
            torch.tensor(run_of_row, device=device),
            torch.tensor(slot_of_row, device=device),
            longest,
            len(runs) * longest == len(prefix_of_row),
        )

    def keep(self, rows: list[int]) -> PrefixRows:
        """The layout after dropping every row not in ``rows``."""
        return PrefixRows.of(self.cache, self.prefix_mask, [self.prefix_of_row[b] for b in rows])

    def to_runs(self, x: torch.Tensor) -> torch.Tensor:
        """[B, Hkv, group, X] per row → [runs, Hkv, slots * group, X], a run's rows side by side
        (zeros in the slots of a shorter run)."""
        batch, heads, group, width = x.shape
        runs = len(self.masked_out)
        if self.grid:
            by_run = x.view(runs, self.longest_run, heads, group, width)
        else:
            by_run = x.new_zeros((runs, self.longest_run, heads, group, width))
            by_run[self.run_of_row, self.slot_of_row] = x
        return by_run.permute(0, 2, 1, 3, 4).reshape(runs, heads, -1, width)

    def to_rows(self, x: torch.Tensor, group: int) -> torch.Tensor:
        """The inverse of ``to_runs``: [runs, Hkv, slots * group, X] → [B, Hkv, group, X]."""
        runs, heads, _, width = x.shape
        by_run = x.view(runs, heads, self.longest_run, group, width).permute(0, 2, 1, 3, 4)
        if self.grid:
            return by_run.reshape(-1, heads, group, width)
        return by_run[self.run_of_row, self.slot_of_row]


_DECODING: contextvars.ContextVar[PrefixRows] = contextvars.ContextVar("shared_prefix_rows")
SHARED_PREFIX_ATTENTION = "rft_shared_prefix"


def shared_prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """One decoding step's attention (query [B, Hq, 1, D]) over each row's prompt, read once per
    run of rows that share it, and the row's own decoded tokens (``key``/``value``); one softmax
    over both, as plain attention over the concatenation."""
    rows = _DECODING.get()
    layer = rows.cache.layers[module.layer_idx]
    batch, q_heads, _, dim = query.shape
    kv_heads = key.shape[1]
    group = q_heads // kv_heads
    q = query.reshape(batch, kv_heads, group, dim) * (scaling or dim**-0.5)
    prefix_keys, prefix_values = layer.prefix_keys, layer.prefix_values  # [U, Hkv, P, D]
    if rows.run_prefix is not None:
        prefix_keys, prefix_values = prefix_keys[rows.run_prefix], prefix_values[rows.run_prefix]
    prefix_scores = torch.matmul(rows.to_runs(q), prefix_keys.transpose(-1, -2))
    prefix_scores = rows.to_rows(prefix_scores.masked_fill(rows.masked_out, float("-inf")), group)
    own_scores = torch.matmul(q, key.transpose(-1, -2))  # [B, Hkv, group, t]
    prefix_len = prefix_scores.shape[-1]
    probs = torch.softmax(torch.cat([prefix_scores, own_scores], -1), dim=-1)
    from_prefix = torch.matmul(rows.to_runs(probs[..., :prefix_len]), prefix_values)
    out = torch.matmul(probs[..., prefix_len:], value) + rows.to_rows(from_prefix, group)
    return out.reshape(batch, 1, q_heads, dim), None


AttentionInterface.register(SHARED_PREFIX_ATTENTION, shared_prefix_attention)
# decoding needs no mask: prompt padding is masked above, and one query sees all its own tokens
AttentionMaskInterface.register(SHARED_PREFIX_ATTENTION, lambda *args, **kwargs: None)


@contextlib.contextmanager
def shared_prefix_decoding(model: Any, rows: PrefixRows) -> Iterator[None]:
    """While in the block, ``model`` attends through ``shared_prefix_attention`` over ``rows``
    (``set_decoding_rows`` replaces them as rows leave the batch)."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = SHARED_PREFIX_ATTENTION
    decoding = _DECODING.set(rows)
    try:
        yield
    finally:
        config._attn_implementation = before
        _DECODING.reset(decoding)


def set_decoding_rows(rows: PrefixRows) -> None:
    """The rows the decoding steps inside ``shared_prefix_decoding`` attend over from now on."""
    _DECODING.set(rows)
