"""``math_trainable_ruler_workflow``: RULER where the judge is the policy itself, and the policy is
also trained as a judge. Semantics of Trinity-RFT's
``trinity/common/workflows/math_trainable_ruler_workflow.py`` (``MathTrainableRULERWorkflow``),
on the rollout engine the workflow is given; no auxiliary model is needed.

Per task: the policy answers ``repeat_times`` times (``math_workflow``'s prompt); each answer
gets its gold reward from the task's reward function (``math_reward`` by default, parts logged
as ``gold_<part>``, sum ``gold_reward``). Then one draw decides whether the truth counts as
available for RL (probability ``gold_probability``, Trinity's 0.2):

- available: the answers are trained on their gold reward; the policy also judges the group
  ``repeat_times`` times (the RULER prompt of ``math_ruler_workflow``), and each judgement
  becomes an experience of its own group (``<group>-ruler``) rewarded for agreeing with the
  gold rewards: ``1 - mean_i |s_i - g_i|`` with ``g_i = (gold_i + 0.1) / 1.2`` (math_reward's
  range [-0.1, 1.1] mapped to [0, 1]); an unusable judgement (:func:`parse_ruler_scores`
  finds no list of the right length) gets 0. (Trinity's code computes this with
  ``ndarray.abs()``, which numpy lacks, so there every judgement ends up rewarded 0; the
  formula its comments state is used here.)
- not available: the policy judges the group once; the answers are trained on the judge's
  scores (an unusable judgement gives every answer ``fallback_score``, 0.0), and the
  judgement itself is not trained on.

The draw is seeded by the task's taskset, index and the engine's model version, so a run
replays (Trinity draws from numpy's global RNG). Parts ``judge_success`` (the share of usable
judgements, 0 or 1 when judged once) and, on judge experiences, ``reward_for_judger``.
When one judgement is unusable among several, the others are still read (Trinity stops at
the first reply without a list). Several experiences per task (2 x repeat_times when the truth
is available): ``buffer.train_batch_size`` counts them.

``workflow_args``: ``gold_probability`` (0.2), ``fallback_score`` (0.0), ``judge_prompt`` and
``judge_system_prompt`` (templates, as for ``math_ruler_workflow``).
"""

from __future__ import annotations

import random
from typing import Any

from rft_core import rewards
from rft_core.data.task import Task
from rft_core.experience import Experience
from rft_core.rollout.base import Generation, RolloutEngine
from rft_core.workflows.base import _group_ids, experience_of, register, sampling_params
from rft_core.workflows.math import MathWorkflow
from rft_core.workflows.ruler import log_failed_judgement, parse_ruler_scores, ruler_messages

NAME = "math_trainable_ruler_workflow"


def judge_reward(scores: list[float] | None, gold_scaled: list[float]) -> float:
    """A judgement's reward: ``1 - mean |s_i - g_i|``; 0 for an unusable one."""
    if scores is None:
        return 0.0
    return 1.0 - sum(abs(s - g) for s, g in zip(scores, gold_scaled, strict=True)) / len(scores)


def mean_scores(judgements: list[list[float] | None], n: int, fallback: float) -> list[float]:
    """Per response, the mean of its score over the usable judgements (``fallback`` if none)."""
    usable = [j for j in judgements if j is not None]
    if not usable:
        return [fallback] * n
    return [sum(j[i] for j in usable) / len(usable) for i in range(n)]


@register(NAME)
class MathTrainableRULERWorkflow(MathWorkflow):
    """See the module doc."""

    takes_args = ("gold_probability", "fallback_score", "judge_prompt", "judge_system_prompt")

    def __init__(self, args: dict[str, Any] | None = None, **models: Any) -> None:
        super().__init__(args, **models)
        self.gold_probability = float(self.args.get("gold_probability", 0.2))
        self.fallback_score = float(self.args.get("fallback_score", 0.0))

    def gold_available(self, task: Task, version: int) -> bool:
        draw = random.Random(f"{task.taskset}:{task.index}:{version}").random()
        return task.truth is not None and draw < self.gold_probability

    def run_batch(
        self, tasks: list[Task], engine: RolloutEngine, repeat_times: int
    ) -> list[Experience]:
        if repeat_times < 1:
            raise ValueError(f"repeat_times must be >= 1, got {repeat_times}")
        reward_fns = [self.check(task) for task in tasks]
        version = int(getattr(engine, "model_version", 0))
        answers = self._generate(tasks, engine, repeat_times)
        available = [self.gold_available(task, version) for task in tasks]
        # every judgement of the batch in one call: n = repeat_times where the truth counts as
        # available (each is trained on), else 1
        judged: list[list[Generation]] = [[] for _ in tasks]
        for n in sorted({repeat_times if a else 1 for a in available}):
            positions = [i for i, a in enumerate(available) if (repeat_times if a else 1) == n]
            params = sampling_params(tasks[positions[0]], n)
            outputs = engine.chat(
                [
                    ruler_messages(
                        tasks[i].prompt,
                        [g.text for g in answers[i]],
                        system_prompt=self.args.get("judge_system_prompt"),
                        prompt=self.args.get("judge_prompt"),
                    )
                    for i in positions
                ],
                params,
            )
            for i, gens in zip(positions, outputs, strict=True):
                judged[i] = gens
        experiences: list[Experience] = []
        for task, fn, group, gens, judgements, gold_known in zip(
            tasks, reward_fns, _group_ids(tasks), answers, judged, available, strict=True
        ):
            gold = [
                rewards.score(fn, g.text, task.truth, task.reward_fn_args)
                if task.truth is not None
                else {}
                for g in gens
            ]
            gold_rewards = [sum(parts.values()) for parts in gold]
            parsed = [parse_ruler_scores(j.text, len(gens)) for j in judgements]
            for j, scores in zip(judgements, parsed, strict=True):
                if scores is None:
                    log_failed_judgement(NAME, task, j.text)
            success = sum(s is not None for s in parsed) / len(parsed)
            ruler = mean_scores(parsed, len(gens), self.fallback_score)
            for i, g in enumerate(gens):
                metrics = {f"gold_{k}": v for k, v in gold[i].items()}
                metrics.update(judge_success=success, ruler_score=ruler[i])
                if gold[i]:
                    metrics["gold_reward"] = gold_rewards[i]
                reward = gold_rewards[i] if gold_known else ruler[i]
                experiences.append(experience_of(task, g, group, reward, metrics, version, fn))
            if gold_known:
                scaled = [(r + 0.1) / 1.2 for r in gold_rewards]
                for j, scores in zip(judgements, parsed, strict=True):
                    reward = judge_reward(scores, scaled)
                    metrics = {"judge_success": success, "reward_for_judger": reward}
                    exp = experience_of(
                        task, j, f"{group}-ruler", reward, metrics, version, "ruler"
                    )
                    exp.info["judge"] = True
                    experiences.append(exp)
        return experiences
