"""``rubric_judge_workflow``: each response rated alone by a judge model against the row's
rubrics, Trinity-RFT's ``trinity/common/workflows/rubric_judge_workflow.py``
(``RubricJudgeWorkflow``, after RaR-Implicit, arXiv 2507.17746; used by
``examples/grpo_rubric/rubric.yaml`` on RaR-Medicine). Semantics reproduced on the judge engine
of ``explorer.auxiliary_models`` (one batched call for every response of the batch).

The policy sees the taskset's system prompt, else a plain "think, then answer" one. The judge
sees the prompt, the response and the row's ``rubric`` column (a list of ``{"description",
"weight"}``; "Rubrics are not provided." when empty) and starts its reply with a fenced JSON
block ``{"rating": N}``, N an integer 1-10. Reward part ``rubric_score`` = ``(N - 1) / 9``.

Parsing (:func:`parse_rating`): the first ```` ```json ```` block (else the first ```` ``` ````
block) up to the next fence, read as JSON; its ``rating`` a number in [1, 10]. Anything else (no
block, bad JSON, no rating, out of range) is a failed judgement: ``fallback_score`` (0.0, as
Trinity), part ``judge_success`` 0 (per task, Trinity logs the share of parsed replies; the
mean of this part is that share), a logged warning, ``info["judge_reply"]`` kept.

``workflow_args``: ``judge_model`` (0), ``fallback_score`` (0.0).
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import Any

from rft_core.data.task import Task
from rft_core.experience import Experience
from rft_core.rollout.base import Generation, RolloutEngine
from rft_core.workflows.base import register
from rft_core.workflows.ruler import judge_of, log_failed_judgement, rubric_text
from rft_core.workflows.simple import SimpleWorkflow

log = logging.getLogger(__name__)

POLICY_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The User asks a question and the Assistant "
    "answers it, first thinking the reasoning through and then giving the answer."
)
JUDGE_SYSTEM_PROMPT = (
    "You are an expert evaluator. Given a prompt, a response and a list of quality rubrics, "
    "rate the overall quality of the response from 1 to 10 by how well it satisfies the "
    "rubrics, weighing them together: a response that violates several rubrics scores low, "
    'one that satisfies all scores high. Start your reply with a JSON block, ```json {"rating": '
    "N}```, N an integer from 1 to 10."
)


def parse_rating(reply: str) -> float | None:
    """The judge's 1-10 rating from its first fenced JSON block; None when unusable."""
    start = reply.find("```json")
    skip = len("```json")
    if start == -1:
        start, skip = reply.find("```"), 3
    if start == -1:
        return None
    end = reply.find("```", start + skip)
    if end == -1:
        return None
    try:
        parsed = json.loads(reply[start + skip : end].strip())
    except ValueError:
        return None
    rating = parsed.get("rating") if isinstance(parsed, dict) else None
    if isinstance(rating, bool) or not isinstance(rating, int | float) or not 1 <= rating <= 10:
        return None
    return float(rating)


def judge_conversation(task: Task, response: str) -> list[dict[str, str]]:
    user = (
        "Rate the response below from 1 to 10 by how well it satisfies the rubrics.\n"
        f"<prompt>\n{task.prompt}\n</prompt>\n<response>\n{response}\n</response>\n"
        f"<rubrics>\n{rubric_text(task.raw.get('rubric') or [])}\n</rubrics>\n"
        "Your JSON evaluation:"
    )
    return [{"role": "system", "content": JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": user}]


@register("rubric_judge_workflow")
class RubricJudgeWorkflow(SimpleWorkflow):
    """See the module doc."""

    takes_args = ("judge_model", "fallback_score")
    uses_reward_fn = False

    def __init__(self, args: dict[str, Any] | None = None, **models: Any) -> None:
        super().__init__(args, **models)
        self.fallback_score = float(self.args.get("fallback_score", 0.0))
        self._replies: list[str] = []

    def messages(self, task: Task) -> list[dict[str, str]]:
        system = POLICY_SYSTEM_PROMPT if task.system_prompt is None else task.system_prompt
        conversation = [{"role": "system", "content": system}] if system else []
        return [*conversation, {"role": "user", "content": task.prompt}]

    def check(self, task: Task) -> str:
        judge_of(self, task)
        return ""

    def score_batch(
        self, tasks: list[Task], reward_fns: list[str], generations: list[list[Generation]]
    ) -> list[list[dict[str, float]]]:
        if not tasks:
            return []
        judge = judge_of(self, tasks[0])
        conversations = [
            judge_conversation(task, g.text)
            for task, gens in zip(tasks, generations, strict=True)
            for g in gens
        ]
        outputs = judge.engine.chat(conversations, replace(judge.sampling, n=1))
        self._replies = [gens[0].text for gens in outputs]
        replies = iter(self._replies)
        scores = []
        for task, gens in zip(tasks, generations, strict=True):
            task_scores = []
            for _ in gens:
                reply = next(replies)
                rating = parse_rating(reply)
                if rating is None:
                    log_failed_judgement("rubric_judge_workflow", task, reply)
                score = self.fallback_score if rating is None else (rating - 1) / 9
                task_scores.append(
                    {"rubric_score": score, "judge_success": float(rating is not None)}
                )
            scores.append(task_scores)
        return scores

    def run_batch(
        self, tasks: list[Task], engine: RolloutEngine, repeat_times: int
    ) -> list[Experience]:
        experiences = super().run_batch(tasks, engine, repeat_times)
        for exp, reply in zip(experiences, self._replies, strict=True):
            exp.reward = exp.metrics["rubric_score"]
            exp.info["judge_reply"] = reply
            exp.info["judge_parsed"] = bool(exp.metrics["judge_success"])
            exp.info["reward_fn"] = "rubric_judge"
        return experiences
