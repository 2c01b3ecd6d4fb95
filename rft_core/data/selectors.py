"""Task selectors that choose *which* rows a batch holds (``data_selector.selector_type``),
reproducing Trinity-RFT's ``trinity/buffer/selector`` (0.6). ``sequential`` and ``shuffle`` are
the reader's own stream (``rft_core.data.reader``); the two here draw each batch afresh:

- ``random``: a batch of ``k`` distinct rows drawn uniformly with numpy's
  ``default_rng(seed + position)``, ``position`` being the tasks consumed before the batch
  (Trinity's ``current_index``), so a run and its resume draw the same batches; rows may repeat
  across batches (no epochs, as in Trinity).
- ``difficulty_based`` (Trinity's BOTS selector): each row has two feature columns
  (``feature_keys``: its pass rate under a weak and a strong reference model) and a Beta(alpha,
  beta) estimate of its pass rate under the policy, both 1 at the start. A batch takes the rows
  whose estimated pass rate ``p`` (the Beta mean, or a Beta draw with ``do_sample``) is nearest
  ``target_reward``: score ``-|target_reward - p|``; ``tau`` 0 takes the ``k`` best scores
  (ties: lower row first), else ``k`` rows drawn without replacement from
  ``softmax(score / tau)`` with a torch generator seeded ``seed + position``. After each step
  :meth:`DifficultySelector.feedback` takes the observed pass rates (each task's mean reward)
  and updates every row (``m`` rollouts per task, ``lamb`` forgetting, ``rho`` weight of the
  interpolated prior):

      c = (mean observed - mean weak) / (mean strong - mean weak + 1e-6)   over the batch's rows
      (c smoothed 0.9 old + 0.1 new after the first step)
      p~_i = clip(weak_i + c (strong_i - weak_i), 0, 1), observed rows: their observed rate
      alpha_i <- (1 - lamb) alpha_i + lamb + (1 - rho) s_i + rho p~_i m
      beta_i  <- (1 - lamb) beta_i  + lamb + (1 - rho) f_i + rho (1 - p~_i) m
      s_i = observed_i m, f_i = (1 - observed_i) m for the batch's rows, 0 elsewhere

  (``adaptive_rho``: rho halves when the prior's mean error on the batch is >= 0.25.)
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from rft_core.config.schema import DataSelectorConfig
from rft_core.errors import ConfigError

DIFFICULTY_KWARGS = {
    "target_reward": 1.0,
    "tau": 1.0,
    "do_sample": False,
    "m": 16,
    "lamb": 0.2,
    "rho": 0.2,
    "adaptive_rho": False,
}
CAP_DISCOUNT = 0.9

log = logging.getLogger(__name__)


class RandomSelector:
    def __init__(self, size: int, seed: int):
        self.size, self.seed = size, seed

    def select(self, position: int, k: int) -> list[int]:
        rng = np.random.default_rng(self.seed + position)
        return [int(i) for i in rng.choice(self.size, min(k, self.size), replace=False)]

    def feedback(self, indices: list[int], pass_rates: list[float]) -> None:
        return None

    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        return None


class DifficultySelector:
    def __init__(self, features: np.ndarray, seed: int, kwargs: dict[str, Any], where: str):
        unknown = sorted(set(kwargs) - set(DIFFICULTY_KWARGS))
        if unknown:
            raise ConfigError(
                f"{where}.kwargs",
                f"difficulty_based takes {', '.join(DIFFICULTY_KWARGS)}; not {', '.join(unknown)}",
            )
        settings = {**DIFFICULTY_KWARGS, **kwargs}
        self.features = np.asarray(features, dtype=float)  # [n, 2]: weak, strong pass rates
        self.seed = seed
        self.target = float(settings["target_reward"])
        self.tau = float(settings["tau"])
        self.do_sample = bool(settings["do_sample"])
        self.m = float(settings["m"])
        self.lamb = float(settings["lamb"])
        self.rho = float(settings["rho"])
        self.adaptive_rho = bool(settings["adaptive_rho"])
        n = len(self.features)
        self.alphas = np.ones(n)
        self.betas = np.ones(n)
        self.cap: float | None = None

    def pass_rates(self, position: int) -> np.ndarray:
        if not self.do_sample:
            return self.alphas / (self.alphas + self.betas)
        return np.random.default_rng(self.seed + position).beta(self.alphas, self.betas)

    def select(self, position: int, k: int) -> list[int]:
        scores = -np.abs(self.target - self.pass_rates(position))
        k = min(k, len(scores))
        if self.tau == 0:
            return [int(i) for i in np.argsort(-scores, kind="stable")[:k]]
        logits = torch.from_numpy(scores / self.tau)
        probs = torch.softmax(logits - logits.max(), dim=0)
        gen = torch.Generator().manual_seed(self.seed + position)
        return [int(i) for i in torch.multinomial(probs, k, replacement=False, generator=gen)]

    def feedback(self, indices: list[int], pass_rates: list[float]) -> None:
        if not indices:
            return
        idx = np.asarray(indices, dtype=int)
        observed = np.clip(np.asarray(pass_rates, dtype=float), 0.0, 1.0)
        weak, strong = self.features[idx, 0].mean(), self.features[idx, 1].mean()
        estimate = (observed.mean() - weak) / (strong - weak + 1e-6)
        self.cap = (
            estimate
            if self.cap is None
            else CAP_DISCOUNT * self.cap + (1 - CAP_DISCOUNT) * estimate
        )
        f = self.features
        prior = np.clip(f[:, 0] + self.cap * (f[:, 1] - f[:, 0]), 0.0, 1.0)
        if self.adaptive_rho and np.mean(np.abs(prior[idx] - observed)) >= 0.25:
            self.rho *= 0.5
        prior[idx] = observed
        s = np.zeros(len(f))
        fail = np.zeros(len(f))
        s[idx] = observed * self.m
        fail[idx] = (1 - observed) * self.m
        keep, rho, m = 1 - self.lamb, self.rho, self.m
        self.alphas = keep * self.alphas + self.lamb + (1 - rho) * s + rho * prior * m
        self.betas = keep * self.betas + self.lamb + (1 - rho) * fail + rho * (1 - prior) * m

    def state(self) -> dict[str, Any]:
        return {
            "alphas": self.alphas.tolist(),
            "betas": self.betas.tolist(),
            "cap": self.cap,
            "rho": self.rho,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        if "alphas" in state:
            self.alphas = np.asarray(state["alphas"], dtype=float)
            self.betas = np.asarray(state["betas"], dtype=float)
            self.cap, self.rho = state.get("cap"), float(state.get("rho", self.rho))


def build_selector(
    taskset: Any, selector_cfg: DataSelectorConfig
) -> RandomSelector | DifficultySelector | None:
    """The selector of ``taskset`` (a Taskset or a chain), or None for the reader's own
    ``sequential`` / ``shuffle`` stream."""
    kind = getattr(selector_cfg, "selector_type", "sequential")
    seed = int(getattr(selector_cfg, "seed", 42))
    where = f"{getattr(taskset.cfg, '_yaml_path', None) or 'buffer.explorer_input.taskset'}.data_selector"
    if kind != "difficulty_based" and (selector_cfg.feature_keys or selector_cfg.kwargs):
        log.warning(
            "%s.feature_keys / kwargs: selector_type %s reads neither (difficulty_based does); "
            "they have no effect",
            where,
            kind,
        )
    if kind == "random":
        return RandomSelector(len(taskset), seed)
    if kind != "difficulty_based":
        return None
    rows = getattr(taskset, "rows", None)
    if rows is None:
        raise ConfigError(
            f"{where}.selector_type",
            "difficulty_based reads one taskset's feature columns; it cannot select across "
            "several chained tasksets (give one taskset)",
        )
    keys = list(selector_cfg.feature_keys or [])
    if len(keys) != 2:
        raise ConfigError(
            f"{where}.feature_keys",
            f"difficulty_based needs exactly 2 columns (the pass rates of a weak and a strong "
            f"reference model), got {keys}",
        )
    missing = [k for k in keys if k not in rows.columns]
    if missing:
        raise ConfigError(
            f"{where}.feature_keys",
            f"column {missing[0]!r} is not in {rows.describe()}; columns present: "
            f"{', '.join(rows.columns)}",
        )
    data = rows.data
    if hasattr(data, "column"):  # a pyarrow table: whole columns at once
        columns = [data.column(k).to_pylist() for k in keys]
    else:
        columns = [[row.get(k) for row in data] for k in keys]
    try:
        features = np.array(columns, dtype=float).T  # [n, 2]
    except (TypeError, ValueError) as err:
        raise ConfigError(
            f"{where}.feature_keys",
            f"columns {keys} of {rows.describe()} must hold numbers (pass rates): {err}",
        ) from None
    if np.isnan(features).any():
        row = int(np.argwhere(np.isnan(features))[0][0])
        raise ConfigError(
            f"{where}.feature_keys",
            f"row {row} of {rows.describe()} has no value in {keys}; every task needs both "
            "pass rates",
        )
    return DifficultySelector(features, seed, dict(selector_cfg.kwargs or {}), where)
