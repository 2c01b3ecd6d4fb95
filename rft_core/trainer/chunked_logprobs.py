"""Log-probs and entropy of target tokens computed from the final hidden states in chunks of
tokens, so that the trainer never holds the ``[tokens x vocab]`` logits whole, in the forward
or in the backward.

For each chunk of ``C`` tokens: ``logits = hidden @ W.T (+ b)`` in the matmul dtype (bf16 under
autocast), then in fp32 ``z = logits / temperature``, ``logp = z[target] - logsumexp(z)`` and
``H = -sum(p * log p)`` with ``log p = z - logsumexp(z)`` (no cancellation of large terms; the
convention of ``rft_core.modeling.token_logprobs``
and verl's actor: entropy of the same tempered distribution the log-probs come from). The
backward recomputes each chunk's logits and applies

    d logp / dz = onehot(target) - p            d H / dz = -p * (log p + H)

so it too holds one chunk's ``[C, V]`` at a time (two fp32 buffers). Peak extra memory is
``~3 * C * V * 4`` bytes instead of ``tokens * V * (2 + 4 + 4)``.

Written as an ``autograd.Function`` rather than ``torch.utils.checkpoint`` per chunk: the
gradient above is two in-place passes over the chunk, where checkpoint would replay
log_softmax/gather/entropy's autograd graph with its temporaries.

``head_scores`` runs it inside the model's own forward (the output head's ``forward`` is swapped
for the call), so that FSDP2's hooks unshard the head's (possibly tied) weight as for a plain
forward, and its backward hooks see the result.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

DEFAULT_CHUNK_TOKENS = 2048


class _ChunkedTokenScores(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        hidden: torch.Tensor,  # [N, H]
        weight: torch.Tensor,  # [V, H]
        bias: torch.Tensor | None,  # [V]
        targets: torch.Tensor,  # [N] long
        temperature: float,
        chunk_tokens: int,
        with_entropy: bool,
        matmul_dtype: torch.dtype,
        fused: bool,
        with_top1: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n = hidden.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        entropy = torch.zeros(n, dtype=torch.float32, device=hidden.device)
        top1 = torch.zeros(n, dtype=torch.float32, device=hidden.device)
        w, b = _cast(weight, bias, matmul_dtype)
        for start in range(0, n, chunk_tokens):
            end = min(n, start + chunk_tokens)
            if fused:
                logits = _logits(hidden[start:end], w, b)
                logp[start:end], entropy[start:end] = fused_chunk_forward()(
                    logits, targets[start:end], temperature
                )
                if with_top1:
                    top1[start:end] = logits.argmax(-1) == targets[start:end]
                continue
            z = _tempered_logits(hidden[start:end], w, b, temperature)
            if with_top1:  # before z turns into log-probs in place; ties go to the lower id
                top1[start:end] = z.argmax(-1) == targets[start:end]
            lse = torch.logsumexp(z, dim=-1)
            logp[start:end] = z.gather(-1, targets[start:end, None]).squeeze(-1) - lse
            if with_entropy:
                logprobs = z.sub_(lse[:, None])
                entropy[start:end] = -(logprobs.exp() * logprobs).sum(-1)
        ctx.save_for_backward(hidden, weight, bias, targets)
        ctx.settings = (temperature, chunk_tokens, matmul_dtype, fused)
        ctx.set_materialize_grads(False)
        ctx.mark_non_differentiable(top1)
        if not with_entropy:
            ctx.mark_non_differentiable(entropy)
        return logp, entropy, top1

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad_logp: torch.Tensor | None, grad_entropy: torch.Tensor | None, _top1: Any
    ):
        hidden, weight, bias, targets = ctx.saved_tensors
        temperature, chunk_tokens, matmul_dtype, fused = ctx.settings
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        if grad_logp is None and grad_entropy is None:
            return (None,) * 10
        grad_hidden = torch.zeros_like(hidden) if need_hidden else None
        # the head's gradient sums over chunks in fp32, whatever the matmul dtype
        grad_weight = weight.new_zeros(weight.shape, dtype=torch.float32) if need_weight else None
        need_bias = need_bias and bias is not None
        grad_bias = weight.new_zeros(weight.shape[0], dtype=torch.float32) if need_bias else None
        w, b = _cast(weight, bias, matmul_dtype)
        for start in range(0, hidden.shape[0], chunk_tokens):
            end = min(hidden.shape[0], start + chunk_tokens)
            h = hidden[start:end]
            if fused:
                grad_logits = fused_chunk_backward()(
                    _logits(h, w, b),
                    targets[start:end],
                    _or_zeros(grad_logp, start, end, hidden.device),
                    _or_zeros(grad_entropy, start, end, hidden.device),
                    temperature,
                )
            else:
                grad_logits = _grad_logits(
                    h, w, b, targets, grad_logp, grad_entropy, start, end, temperature
                )
                grad_logits = grad_logits.div_(temperature).to(matmul_dtype)
            if need_hidden:
                grad_hidden[start:end] = (grad_logits @ w).to(hidden.dtype)
            if need_weight:
                grad_weight += (grad_logits.T @ h.to(matmul_dtype)).float()
            if need_bias:
                grad_bias += grad_logits.float().sum(0)
        return (
            grad_hidden,
            grad_weight.to(weight.dtype) if need_weight else None,
            grad_bias.to(bias.dtype) if need_bias else None,
            *(None,) * 7,
        )


def _grad_logits(
    h: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor | None,
    targets: torch.Tensor,
    grad_logp: torch.Tensor | None,
    grad_entropy: torch.Tensor | None,
    start: int,
    end: int,
    temperature: float,
) -> torch.Tensor:
    """fp32 dLoss/dz of one chunk (z: the tempered logits), eagerly: the chunk's logits are
    recomputed and turned into the gradient in place (two fp32 [C, V] buffers)."""
    z = _tempered_logits(h, w, b, temperature)
    z.sub_(torch.logsumexp(z, dim=-1, keepdim=True))  # z: the log-probs y
    probs = z.exp()
    # z becomes dLoss/dz, in place: first the entropy term, -p * (y + H) * dH, then the
    # log-prob term
    if grad_entropy is not None:
        entropy = -(probs * z).sum(-1, keepdim=True)
        z.add_(entropy).mul_(probs).mul_(-grad_entropy[start:end, None])
    else:
        z.zero_()
    if grad_logp is not None:
        g = grad_logp[start:end, None]
        z.sub_(probs.mul_(g)).scatter_add_(-1, targets[start:end, None], g)
    return z


def _or_zeros(
    grad: torch.Tensor | None, start: int, end: int, device: torch.device
) -> torch.Tensor:
    """Rows ``start:end`` of an output's incoming gradient, zeros when it has none."""
    return grad[start:end] if grad is not None else torch.zeros(end - start, device=device)


def _chunk_forward(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 log-prob of each row's target and the row's entropy, from a chunk's [C, V] logits
    (any dtype); the fused path's forward, one pass over the logits once compiled."""
    z = logits.float() / temperature
    y = z - torch.logsumexp(z, dim=-1, keepdim=True)
    logp = y.gather(-1, targets[:, None]).squeeze(-1)
    return logp, -(y.exp() * y).sum(-1)


def _chunk_backward(
    logits: torch.Tensor,
    targets: torch.Tensor,
    grad_logp: torch.Tensor,
    grad_entropy: torch.Tensor,
    temperature: float,
) -> torch.Tensor:
    """dLoss/dlogits of a chunk in the logits' dtype (module docstring's formulas, divided by
    the temperature); the fused path's backward, one pass over the logits once compiled."""
    z = logits.float() / temperature
    y = z - torch.logsumexp(z, dim=-1, keepdim=True)
    p = y.exp()
    entropy = -(p * y).sum(-1, keepdim=True)
    columns = torch.arange(logits.shape[-1], device=logits.device)
    onehot = (columns[None, :] == targets[:, None]).float()
    grad_z = -p * (y + entropy) * grad_entropy[:, None] + (onehot - p) * grad_logp[:, None]
    return (grad_z / temperature).to(logits.dtype)


_FUSED: dict[str, Any] = {}


def fused_chunk_forward() -> Any:
    """``_chunk_forward`` compiled (once per process, symbolic chunk sizes)."""
    if "forward" not in _FUSED:
        _FUSED["forward"] = torch.compile(_chunk_forward, dynamic=True)
    return _FUSED["forward"]


def fused_chunk_backward() -> Any:
    """``_chunk_backward`` compiled (once per process, symbolic chunk sizes)."""
    if "backward" not in _FUSED:
        _FUSED["backward"] = torch.compile(_chunk_backward, dynamic=True)
    return _FUSED["backward"]


def _cast(
    weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor | None]:
    return weight.to(dtype), bias.to(dtype) if bias is not None else None


def _logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``hidden @ W.T + b`` of one chunk in ``weight``'s dtype."""
    logits = hidden.to(weight.dtype) @ weight.T
    return logits + bias if bias is not None else logits


def _tempered_logits(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float
) -> torch.Tensor:
    """fp32 ``(hidden @ W.T + b) / temperature`` of one chunk, the matmul in ``weight``'s dtype."""
    logits = hidden.to(weight.dtype) @ weight.T
    if bias is not None:
        logits = logits + bias
    z = logits.float()  # a fresh tensor either way: dividing in place is safe
    return z.div_(temperature) if temperature != 1.0 else z


def chunked_token_scores(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = True,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    fused: bool = False,
    with_top1: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """fp32 log-probs of ``targets``, (``with_entropy``) the entropy and (``with_top1``) 1.0
    where the target is the most likely token (0.0 elsewhere; no gradient), under
    ``softmax((hidden @ weight.T + bias) / temperature)``, ``chunk_tokens`` tokens at a time.

    ``hidden``: [..., H]; ``targets``: [...]; returns tensors shaped like ``targets``. The matmul
    runs in the autocast dtype when autocast is on (as ``nn.Linear`` would), else in
    ``hidden``'s dtype. ``fused``: each chunk's soft-max work runs as compiled kernels (one
    pass over the logits forward, one backward; ``trainer.use_torch_compile``) instead of ~8 and
    ~12 eager passes over fp32 ``[C, V]`` buffers.
    """
    shape = targets.shape
    device = hidden.device.type
    matmul_dtype = (
        torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype
    )
    with torch.autocast(device, enabled=False):
        logp, entropy, top1 = _ChunkedTokenScores.apply(
            hidden.reshape(-1, hidden.shape[-1]),
            weight,
            bias,
            targets.reshape(-1),
            float(temperature) if temperature > 0 else 1.0,
            max(1, int(chunk_tokens)),
            with_entropy,
            matmul_dtype,
            fused,
            with_top1,
        )
    return (
        logp.view(shape),
        entropy.view(shape) if with_entropy else None,
        top1.view(shape) if with_top1 else None,
    )


def scores_in_head(model: Any) -> bool:
    """Whether ``model``'s logits are its output head's plain linear map of the hidden states
    (no soft-capping or scale applied after the head), so that ``head_scores`` applies."""
    head = model.get_output_embeddings()
    config = model.config
    after_head = getattr(config, "final_logit_softcapping", None) or getattr(
        config, "logit_scale", None
    )
    return isinstance(head, torch.nn.Linear) and not after_head


class HeadScores:
    """The targets of the output head's next call (see ``head_scores``)."""

    targets: torch.Tensor | None = None


@contextlib.contextmanager
def head_scores(
    model: Any,
    *,
    temperature: float,
    with_entropy: bool,
    entropy_grad: bool = False,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    fused: bool = False,
    with_top1: bool = False,
) -> Iterator[HeadScores]:
    """While in the block, ``model``'s output head maps the hidden states it is given
    ([B, K, H], the ``logits_to_keep`` positions) to ``[B, K, 3]``: the log-prob of
    ``scores.targets`` ([B, K] long, set before each call), the entropy (zeros without
    ``with_entropy``; detached without ``entropy_grad``, so its backward pass is skipped) and
    whether the target is the top-1 token (zeros without ``with_top1``); the model returns that
    in place of its logits."""
    head = model.get_output_embeddings()
    scores = HeadScores()

    def score(hidden: torch.Tensor) -> torch.Tensor:
        logp, entropy, top1 = chunked_token_scores(
            hidden,
            head.weight,
            head.bias,
            scores.targets,
            temperature=temperature,
            with_entropy=with_entropy,
            chunk_tokens=chunk_tokens,
            fused=fused,
            with_top1=with_top1,
        )
        if entropy is None:
            entropy = torch.zeros_like(logp)
        top1 = top1 if top1 is not None else torch.zeros_like(logp)
        return torch.stack([logp, entropy if entropy_grad else entropy.detach(), top1], -1)

    head.forward = score
    try:
        yield scores
    finally:
        del head.forward
