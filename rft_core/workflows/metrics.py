"""Explorer metrics computed from experiences, under the names Trinity users key on.

- :func:`rollout_metrics`: ``rollout/<part>/{mean,max,min}`` for each reward part,
  ``rollout/reward/{mean,max,min}`` and ``response_length/{mean,max,min,clip_ratio}``
  (clip_ratio = share of responses cut at ``max_tokens``).
- :func:`eval_metrics`: Trinity's convention (``calculate_task_level_metrics``): for each task,
  the mean and the population std (numpy's default, ddof 0) of a metric over its first ``k``
  responses; the taskset figure is the mean of those per-task values over tasks:
  ``eval/<taskset>/<part>/mean@k`` and, for k > 1, ``std@k``; for 0/1 metrics also
  ``pass@k`` (share of tasks with at least one success, Codex's unbiased estimator).
"""

from __future__ import annotations

from math import comb
from statistics import fmean, pstdev

from rft_core.experience import Experience


def _stats(prefix: str, values: list[float]) -> dict[str, float]:
    return {
        f"{prefix}/mean": fmean(values),
        f"{prefix}/max": float(max(values)),
        f"{prefix}/min": float(min(values)),
    }


def _metric_names(experiences: list[Experience]) -> list[str]:
    names: dict[str, None] = {}
    for exp in experiences:
        names.update(dict.fromkeys(exp.metrics))
    return list(names)


def rollout_metrics(experiences: list[Experience]) -> dict[str, float]:
    if not experiences:
        return {}
    out: dict[str, float] = {}
    for name in _metric_names(experiences):
        values = [e.metrics[name] for e in experiences if name in e.metrics]
        out.update(_stats(f"rollout/{name}", values))
    out.update(_stats("rollout/reward", [e.reward for e in experiences]))
    out.update(_stats("response_length", [float(len(e.response_ids)) for e in experiences]))
    out["response_length/clip_ratio"] = fmean(float(e.truncated) for e in experiences)
    return out


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn from n (c correct) is correct."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def eval_metrics(experiences: list[Experience], taskset_name: str, k: int) -> dict[str, float]:
    if not experiences:
        return {}
    by_task: dict[str, list[Experience]] = {}
    for exp in experiences:
        by_task.setdefault(exp.group_id, []).append(exp)
    prefix = f"eval/{taskset_name}"
    out: dict[str, float] = {}
    for name in _metric_names(experiences):
        per_task = [
            [e.metrics[name] for e in group if name in e.metrics][:k] for group in by_task.values()
        ]
        per_task = [values for values in per_task if values]
        out[f"{prefix}/{name}/mean@{k}"] = fmean(fmean(v) for v in per_task)
        if k > 1:
            out[f"{prefix}/{name}/std@{k}"] = fmean(pstdev(v) for v in per_task)
            if all(x in (0.0, 1.0) for v in per_task for x in v):
                out[f"{prefix}/{name}/pass@{k}"] = fmean(
                    pass_at_k(len(v), int(sum(v)), min(k, len(v))) for v in per_task
                )
    return out
