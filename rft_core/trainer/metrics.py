"""The metrics of a trainer step, under Trinity's names: the losses' weighted sums (each
micro-batch adds its share of a global mean), and the batch's rewards, response lengths,
gradient norm, learning rate and throughput.

A sharded rank reports its own share of every global mean; ``rft_core.trainer.ranks``'s
``merge_metrics`` adds the ranks' shares up.
"""

from __future__ import annotations

from rft_core.experience import Experience
from rft_core.trainer.batching import is_trained
from rft_core.trainer.collectives import StepRanks


def add_weighted(sums: dict[str, float], name: str, value: float, weight: float) -> None:
    """``sums[name] += value × weight``: a micro-batch's share of a global mean."""
    sums[name] = sums.get(name, 0.0) + value * weight


def step_metrics(
    experiences: list[Experience],
    ranks: StepRanks,
    *,
    grad_norm: float,
    lr: float,
    elapsed: float,
    rewarded: bool = True,
) -> dict[str, float]:
    """Means over the trained experiences of the global batch (filtered groups and a rank's
    stand-in count in none), the step's gradient norm, learning rate and speed. The mean
    reward only when the experiences are ``rewarded`` (rollouts; not SFT's or DPO's dataset
    rows, whose reward is a placeholder 0)."""
    tokens = sum(len(e.prompt_ids) + len(e.response_ids) + len(e.rejected_ids) for e in experiences)
    trained = [e for e in experiences if is_trained(e)]
    lengths = [len(e.response_ids) for e in trained]
    # mix, mix_chord: expert rows carry no reward of their own
    rollouts = [e for e in trained if not e.info.get("is_expert")]
    rows, rollout_rows = ranks.total(len(trained), len(rollouts))
    rows = max(rows, 1.0)
    metrics = {
        "actor/grad_norm": grad_norm,
        "actor/lr": lr,
        "response_length/mean": sum(lengths) / rows,
        "response_length/clip_ratio": sum(e.truncated for e in trained) / rows,
        "perf/throughput": tokens / elapsed,
        "time/train_step": elapsed,
    }
    if rewarded:
        metrics["critic/rewards/mean"] = sum(e.reward for e in rollouts) / max(rollout_rows, 1.0)
    if lengths:
        metrics["response_length/max"] = float(max(lengths))
        metrics["response_length/min"] = float(min(lengths))
    return metrics
