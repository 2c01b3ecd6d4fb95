"""The LM head's per-token outputs without the ``[tokens x vocab]`` logits held whole: the
log-prob of each target token (``rft_core.modeling.token_logprobs``'s convention: fp32,
``log_softmax(logits / temperature)``) and the entropy of the next-token distribution (at
temperature 1, as ``rft_core.algorithms.entropy.entropy_from_logits``), a chunk of tokens at a
time. Under autograd each chunk is recomputed in the backward pass (``torch.utils.checkpoint``),
so the backward, too, holds one chunk's logits at a time: for Qwen2.5's 151,936-token
vocabulary a 64k-token step would otherwise keep ~40 GB of fp32 logits alive.

``token_head(model, targets, ...)`` swaps the model's output-embedding forward for the duration
of one model call, so the head's weight is read inside the model's own forward: FSDP2 has it
unsharded there, a tied embedding is the same tensor, and autocast applies as it does to the
plain head.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

DEFAULT_CHUNK_TOKENS = 4096


def _chunk_outputs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    temperature: float,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = F.linear(hidden, weight, bias).float()
    scaled = logits / temperature if temperature > 0 and temperature != 1.0 else logits
    logsumexp = torch.logsumexp(scaled, dim=-1)
    logprobs = scaled.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logsumexp
    if not with_entropy:
        return logprobs, logprobs.new_zeros(0)
    # -sum(p log p) at temperature 1, reusing the logsumexp (a linear layer's logits are finite)
    raw_logsumexp = logsumexp if scaled is logits else torch.logsumexp(logits, dim=-1)
    log_probs = logits - raw_logsumexp.unsqueeze(-1)
    return logprobs, -(torch.exp(log_probs) * log_probs).sum(-1)


def head_outputs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    temperature: float,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    with_entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log-probs [N], entropies [N] or None) of ``targets`` [N] under ``hidden`` [N, H] @
    ``weight``."""
    keep_graph = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    logprobs, entropies = [], []
    for start in range(0, hidden.shape[0], chunk_tokens):
        args = (hidden[start : start + chunk_tokens], weight, bias,
                targets[start : start + chunk_tokens], temperature, with_entropy)  # fmt: skip
        if keep_graph:
            lp, ent = checkpoint(_chunk_outputs, *args, use_reentrant=False)
        else:
            lp, ent = _chunk_outputs(*args)
        logprobs.append(lp)
        entropies.append(ent)
    if not logprobs:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty if with_entropy else None
    return torch.cat(logprobs), torch.cat(entropies) if with_entropy else None


class _Targets:
    """What the swapped head computes for the model call in progress (None: plain logits)."""

    def __init__(self) -> None:
        self.targets: torch.Tensor | None = None
        self.with_entropy = True


@contextlib.contextmanager
def token_head(
    model: Any, temperature: float, chunk_tokens: int = DEFAULT_CHUNK_TOKENS
) -> Iterator[Any]:
    """While in the block, a model call made after ``set_targets(targets [B, R])`` returns, in
    place of its logits over ``R + 1`` positions, a [B, R, 2] tensor: each position's log-prob
    of the next target token and its entropy (the last position predicts nothing and is
    dropped); [B, R, 1] after ``set_targets(targets, with_entropy=False)``. Calls with no
    targets set get plain logits."""
    head = model.get_output_embeddings()
    state = _Targets()

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        targets = state.targets
        if targets is None:
            return F.linear(hidden, head.weight, head.bias)
        rows, width = targets.shape
        if hidden.shape[1] != width + 1:
            raise ValueError(f"head got {hidden.shape[1]} positions for {width} targets")
        logprobs, entropy = head_outputs(
            hidden[:, :-1].reshape(rows * width, -1),
            head.weight,
            head.bias,
            targets.reshape(-1),
            temperature,
            chunk_tokens,
            state.with_entropy,
        )
        parts = [logprobs] if entropy is None else [logprobs, entropy]
        return torch.stack([p.view(rows, width) for p in parts], dim=-1)

    def set_targets(targets: torch.Tensor | None, with_entropy: bool = True) -> None:
        state.targets, state.with_entropy = targets, with_entropy

    head.forward = forward  # an instance attribute: the class's forward is untouched
    try:
        yield set_targets
    finally:
        del head.forward
