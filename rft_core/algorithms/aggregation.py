"""How a [batch, tokens] loss matrix becomes one scalar (``algorithm.loss_agg_mode``).

Semantics follow verl's ``agg_loss`` (which Trinity uses):

- ``token-mean``: sum over every unmasked token / number of unmasked tokens.
- ``seq-mean-token-sum``: per sequence, sum its tokens; then mean over sequences.
- ``seq-mean-token-mean``: per sequence, mean over its tokens; then mean over sequences.
- ``seq-mean-token-sum-norm`` (Dr. GRPO): sum over all tokens / a constant horizon. verl uses
  the padded width ``mask.shape[-1]``; pass ``horizon`` (e.g. ``max_response_tokens``) to make
  the constant independent of how a micro-batch happened to be padded.
"""

from __future__ import annotations

import torch

from rft_core.errors import ConfigError

LOSS_AGG_MODES = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1 (over everything, or along ``dim``)."""
    mask = mask.to(values.dtype)
    if dim is None:
        return (values * mask).sum() / mask.sum().clamp(min=1.0)
    return (values * mask).sum(dim) / mask.sum(dim).clamp(min=1.0)


def aggregate_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    *,
    horizon: int | None = None,
) -> torch.Tensor:
    """Aggregate ``loss_mat`` [B, T] under ``mask`` [B, T] into a scalar by ``mode``."""
    mask = mask.to(loss_mat.dtype)
    if mode == "token-mean":
        return masked_mean(loss_mat, mask)
    seq_sums = (loss_mat * mask).sum(dim=-1)
    if mode == "seq-mean-token-sum":
        return seq_sums.mean()
    if mode == "seq-mean-token-mean":
        # A fully masked row contributes 0 instead of NaN.
        return (seq_sums / mask.sum(dim=-1).clamp(min=1.0)).mean()
    if mode == "seq-mean-token-sum-norm":
        return seq_sums.sum() / float(horizon if horizon is not None else mask.shape[-1])
    raise ConfigError(
        "algorithm.loss_agg_mode",
        f"unknown loss aggregation mode {mode!r}; choose one of {', '.join(LOSS_AGG_MODES)}",
        value=mode,
        allowed=list(LOSS_AGG_MODES),
    )
