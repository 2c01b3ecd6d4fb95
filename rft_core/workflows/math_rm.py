"""``math_rm_workflow``: math answers scored by a judge model, one of ``explorer.auxiliary_models``,
generated through our own rollout engine (Trinity-RFT's ``MathRMWorkflow`` scores with an
RM-Gallery reward model or an outside OpenJudge API instead).

The policy sees the taskset's system prompt (none when the taskset gives none) and the question,
as in Trinity's ``SimpleWorkflow``. Each response then goes to the judge in one batched call: the
judge sees the question, the reference answer (the task's truth, when there is one) and the
response, and ends its reply with ``<score>N</score>`` (``Score: N`` is read too). Reward parts:

- ``judge_score``: the score mapped to [0, 1] (``normalize_score``, default true) or as given;
  0 when the judge's reply holds no score in ``[score_min, score_max]`` (the experience's
  ``info["judge_parsed"]`` is then false and ``info["judge_reply"]`` shows why);
- plus the parts of the task's reward function when it names one (``default_reward_fn_type``),
  e.g. ``math_reward`` for a rule-based check beside the judge.

``workflow_args``: ``judge_model`` (index into ``explorer.auxiliary_models``, 0),
``score_min`` (0), ``score_max`` (10), ``normalize_score`` (true), ``judge_prompt`` (a template
with ``{question}``, ``{reference}``, ``{response}``, ``{score_min}``, ``{score_max}``),
``judge_system_prompt`` ("" for none). The judge samples with its entry's settings (greedy by
default) and its ``max_response_tokens``.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from rft_core import rewards
from rft_core.data.task import Task
from rft_core.errors import ConfigError
from rft_core.experience import Experience
from rft_core.rollout.base import Generation, RolloutEngine
from rft_core.workflows.base import register, taskset_path
from rft_core.workflows.simple import SimpleWorkflow

JUDGE_SYSTEM_PROMPT = (
    "You are a strict grader of math solutions. Compare the response with the reference answer "
    "and judge whether its final answer is correct and its reasoning sound."
)
JUDGE_PROMPT = (
    "Question:\n{question}\n\nReference answer:\n{reference}\n\nResponse:\n{response}\n\n"
    "Rate the response from {score_min} (wrong) to {score_max} (correct and well reasoned). "
    "End your reply with the score as <score>N</score>."
)

_SCORE_TAG_RE = re.compile(r"<score>\s*([-+]?\d+(?:\.\d+)?)\s*</score>", re.IGNORECASE)
_SCORE_LINE_RE = re.compile(r"score\s*[:=]\s*([-+]?\d+(?:\.\d+)?)", re.IGNORECASE)


def parse_judge_score(reply: str, score_min: float, score_max: float) -> float | None:
    """The judge's score: the last ``<score>N</score>``, else the last ``Score: N``; None when
    there is none or it lies outside ``[score_min, score_max]``."""
    found = _SCORE_TAG_RE.findall(reply) or _SCORE_LINE_RE.findall(reply)
    if not found:
        return None
    value = float(found[-1])
    return value if score_min <= value <= score_max else None


@register("math_rm_workflow")
@register("async_math_rm_workflow")  # Trinity's async variant (batched here)
class MathRMWorkflow(SimpleWorkflow):
    """The policy's prompt is :class:`SimpleWorkflow`'s; the judge scores (see the module doc)."""

    default_reward_fn = None  # the judge scores; a task's reward function adds its parts
    takes_args = (
        "judge_model",
        "score_min",
        "score_max",
        "normalize_score",
        "judge_prompt",
        "judge_system_prompt",
    )

    def __init__(self, args: dict[str, Any] | None = None, **models: Any) -> None:
        super().__init__(args, **models)
        self.judge_index = int(self.args.get("judge_model", 0))
        self.score_min = float(self.args.get("score_min", 0))
        self.score_max = float(self.args.get("score_max", 10))
        self.normalize_score = bool(self.args.get("normalize_score", True))
        self.judge_prompt = str(self.args.get("judge_prompt", JUDGE_PROMPT))
        self.judge_system_prompt = str(self.args.get("judge_system_prompt", JUDGE_SYSTEM_PROMPT))
        if self.score_max <= self.score_min:
            raise ConfigError(
                "workflow_args.score_max",
                f"must be > score_min ({self.score_min}), got {self.score_max}",
                value=self.score_max,
            )
        self._judge_replies: list[list[str]] = []

    def check(self, task: Task) -> str:
        if not 0 <= self.judge_index < len(self.auxiliary_models):
            raise ConfigError(
                f"{taskset_path(task)}.workflow_args.judge_model"
                if self.auxiliary_models
                else "explorer.auxiliary_models",
                f"math_rm_workflow needs a judge: judge_model {self.judge_index} but "
                f"{len(self.auxiliary_models)} auxiliary model(s); add one under "
                "explorer.auxiliary_models (model_path: <judge model>)",
                value=self.judge_index,
            )
        return super().check(task) if task.reward_fn else ""

    def judge_messages(self, task: Task, response: str) -> list[dict[str, str]]:
        user = self.judge_prompt.format(
            question=task.prompt,
            reference=task.truth if task.truth is not None else "(none given)",
            response=response,
            score_min=f"{self.score_min:g}",
            score_max=f"{self.score_max:g}",
        )
        system = [{"role": "system", "content": self.judge_system_prompt}]
        return [*(system if self.judge_system_prompt else []), {"role": "user", "content": user}]

    def judge_score(self, reply: str) -> float | None:
        score = parse_judge_score(reply, self.score_min, self.score_max)
        if score is None or not self.normalize_score:
            return score
        return (score - self.score_min) / (self.score_max - self.score_min)

    def score_batch(
        self, tasks: list[Task], reward_fns: list[str], generations: list[list[Generation]]
    ) -> list[list[dict[str, float]]]:
        judge = self.auxiliary_models[self.judge_index]
        conversations = [
            self.judge_messages(task, g.text)
            for task, gens in zip(tasks, generations, strict=True)
            for g in gens
        ]
        outputs = judge.engine.chat(conversations, replace(judge.sampling, n=1))
        replies = iter([gens[0].text for gens in outputs])
        self._judge_replies = []
        scores: list[list[dict[str, float]]] = []
        for task, fn, gens in zip(tasks, reward_fns, generations, strict=True):
            task_scores, task_replies = [], []
            for g in gens:
                reply = next(replies)
                parts = {"judge_score": self.judge_score(reply) or 0.0}
                if fn:
                    parts.update(
                        rewards.score(
                            fn,
                            g.text,
                            task.truth,
                            task.reward_fn_args,
                            response_length=len(g.response_ids),
                        )
                    )
                task_scores.append(parts)
                task_replies.append(reply)
            scores.append(task_scores)
            self._judge_replies.append(task_replies)
        return scores

    def run_batch(
        self, tasks: list[Task], engine: RolloutEngine, repeat_times: int
    ) -> list[Experience]:
        experiences = super().run_batch(tasks, engine, repeat_times)
        replies = [reply for task_replies in self._judge_replies for reply in task_replies]
        for exp, reply in zip(experiences, replies, strict=True):
            exp.info["judge_reply"] = reply
            exp.info["judge_parsed"] = (
                parse_judge_score(reply, self.score_min, self.score_max) is not None
            )
            exp.info["reward_fn"] = exp.info["reward_fn"] or "judge"
        return experiences
