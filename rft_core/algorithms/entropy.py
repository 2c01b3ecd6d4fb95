"""Token entropy of the policy's next-token distribution, for the entropy term
``- entropy_coef * aggregate(entropy)`` of the actor loss and the ``actor/entropy`` metric."""

from __future__ import annotations

import torch


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dim: [B, T, V] -> [B, T].

    H = logsumexp(z) - sum(softmax(z) * z), which avoids log(0); tokens with zero probability
    (logit -inf, e.g. filtered by top-k) contribute 0. Computed in fp32 so bf16 logits keep
    their small terms.
    """
    logits = logits.float()
    probs = torch.softmax(logits, dim=-1)
    weighted = torch.where(probs > 0, probs * logits, torch.zeros_like(logits))
    return torch.logsumexp(logits, dim=-1) - weighted.sum(dim=-1)
