"""KL estimators between the policy and the reference model, per token, from log-probs of the
sampled tokens (Schulman's k1/k2/k3). Used two ways:

- as a loss (``algorithm.kl_loss_fn``, GRPO default ``k2`` with ``kl_coef`` 0.001):
  :func:`kl_loss` adds ``kl_coef * aggregate(KL)`` to the policy loss;
- as a reward penalty (``algorithm.kl_penalty_fn``): :func:`apply_kl_penalty` subtracts
  ``coef * KL`` from the token-level rewards before advantages are computed;
  :func:`kl_penalized_rewards` is the same penalty summed over each response, the one reward
  per response that group advantage fns (rloo) take. Which algorithm types apply it:
  ``rft_core.config.presets`` (``applies_kl_penalty``).

With ``d = lp - ref``: k1 = d; k2 = d²/2; k3 = exp(-d) - 1 + d;
low_var_kl = k3 with ``d`` clamped to ±20 and the result clamped to ±10 (verl's stable form).
Estimators are registered in ``KL_FNS`` (the config's choices for both fields come from it,
through ``rft_core/config/registered_names.json``): a new one is one decorated function here.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rft_core.algorithms.aggregation import aggregate_loss, masked_mean
from rft_core.registry import Registry

KLFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# in the order the config's choices list them
KL_FNS: Registry[KLFn] = Registry("KL function", "algorithm.kl_loss_fn", sort_names=False)


@KL_FNS.register("none")
def kl_none(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(logprobs)


@KL_FNS.register("k1")
def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    return logprobs - ref_logprobs


@KL_FNS.register("k2")
def kl_k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    return 0.5 * (logprobs - ref_logprobs).square()


@KL_FNS.register("k3")
def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    log_ratio = ref_logprobs - logprobs
    return torch.exp(log_ratio) - 1.0 - log_ratio


@KL_FNS.register("low_var_kl")
def low_var_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    log_ratio = torch.clamp(ref_logprobs - logprobs, min=-20.0, max=20.0)
    return torch.clamp(torch.exp(log_ratio) - 1.0 - log_ratio, min=-10.0, max=10.0)


def get_kl_fn(name: str | None, *, path: str = "algorithm.kl_loss_fn") -> KLFn:
    """The estimator named ``name`` (case-insensitive; None means "none"); unknown names raise
    ConfigError with the registered ones."""
    return KL_FNS.get("none" if name is None else str(name).lower(), path=path)


def kl_loss(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    kl_fn: str = "k2",
    loss_agg_mode: str = "token-mean",
    *,
    horizon: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Aggregated KL(policy ‖ reference) as a loss term (multiply by ``kl_coef`` outside).
    Metric: ``kl_loss`` (logged as ``actor/kl_loss``)."""
    kl = get_kl_fn(kl_fn)(logprobs, ref_logprobs)
    loss = aggregate_loss(kl, mask, loss_agg_mode, horizon=horizon)
    return loss, {"kl_loss": float(loss.detach())}


def apply_kl_penalty(
    token_rewards: torch.Tensor,
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    kl_fn: str = "k1",
    kl_coef: float = 0.001,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``token_rewards - kl_coef * KL`` on unmasked tokens. Metrics: ``kl_penalty`` (mean KL per
    token) and ``kl_coef``."""
    kl = get_kl_fn(kl_fn, path="algorithm.kl_penalty_fn")(logprobs, ref_logprobs)
    kl = kl * mask.to(kl.dtype)
    metrics = {"kl_penalty": float(masked_mean(kl, mask).detach()), "kl_coef": float(kl_coef)}
    return token_rewards - kl_coef * kl, metrics


def kl_penalized_rewards(
    rewards: torch.Tensor,
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    kl_fn: str = "k1",
    kl_coef: float = 0.001,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``r_i - kl_coef * sum_t KL_it`` over the unmasked tokens of each response ([B] from
    [B] rewards and [B, T] log-probs): the outcome reward on the last token after
    :func:`apply_kl_penalty`, summed over the response as Trinity's rloo (verl's outcome
    advantages) sums token-level rewards. Metrics as :func:`apply_kl_penalty`."""
    penalty, metrics = apply_kl_penalty(
        torch.zeros_like(logprobs), logprobs, ref_logprobs, mask, kl_fn, kl_coef
    )
    return rewards.to(penalty.dtype) + penalty.sum(dim=-1), metrics
