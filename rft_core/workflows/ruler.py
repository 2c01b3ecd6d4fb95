"""RULER judge workflows: a judge model sees ALL responses to one task together and answers with
one score in [0, 1] per response, which becomes each response's reward (relative judging: the
group is what GRPO normalises over anyway). Semantics of Trinity-RFT's
``trinity/common/workflows/math_ruler_workflow.py`` (``math_ruler_workflow``) and of the group
judge with rubrics it registered as ``medicine_ruler_workflow`` (the name its example
``examples/grpo_medicine_ruler/medicine_ruler.yaml`` uses; a later Trinity file,
``rubric_judge_workflow.py``, first held it under that name), reproduced on the judge engine of
``explorer.auxiliary_models`` that ``math_rm_workflow`` uses, so a CPU run can judge with the
tiny demo model. RULER itself is OpenPipe ART's ``rewards/ruler.py``.

- ``math_ruler_workflow``: the policy answers as in ``math_workflow`` (think/answer system
  prompt unless the taskset gives one). The judge prompt holds the question, the format the
  solutions were asked for, and ``Candidate solution i: …`` for each; the judge ends with a
  list ``[s1, …, sn]``. The task's reward function (``math_reward`` by default) still runs on
  each response, but only as the logged "gold" reward (``gold_reward``, and its parts as
  ``gold_<part>``), as in
  Trinity; the training reward is the judge's score (part ``ruler_score``). Where the gold
  reward has an ``accuracy`` part and the judge's reply parsed, ``judge_agreement`` logs
  whether the judge called the answer as the truth does (score >= 0.5 for a right answer,
  < 0.5 for a wrong one; not in Trinity, logged only).
- ``medicine_ruler_workflow``: the same, with the row's ``rubric`` column (a list of
  ``{"description", "weight"}``) shown to the judge; no gold reward (Trinity's placeholder
  reward function is not run).

Parsing (:func:`parse_ruler_scores`): the LAST ``[...]`` of the judge's reply, split on commas,
every item a plain number (no ``eval``), as many as there are responses; each score clipped to
[0, 1]. Anything else (no list, a word in it, the wrong length) is a failed judgement: every
response of the group gets ``fallback_score`` (0.0, Trinity's), the part ``judge_success`` is
0.0 (1.0 when parsed; logged as ``rollout/judge_success/mean``), a warning is logged with the
reply's start, and ``info["judge_reply"]`` keeps the reply. Never an exception.
(Trinity's math version accepts a list of the wrong length and indexes past it; here that is a
failed judgement.)

``workflow_args``: ``judge_model`` (index into ``explorer.auxiliary_models``, 0),
``fallback_score`` (0.0), and for a judge with a short context (the tiny demo model reads one
token per character) ``judge_prompt``: a template replacing the judge's user turn, with
``{question}``, ``{solutions}`` (``1: …`` one per line), ``{answers}`` (the same lines with
only each response's final answer: the text of its last ``<answer>…</answer>``, ``-`` when it
has none; for a judge that reads one token per character, as the demo judge of
``rft_core.demo_judge``), ``{n}`` and ``{rubric}``, and
``judge_system_prompt`` (the same fields; "" or unset: no system turn when ``judge_prompt`` is
given). The judge samples with its entry's settings (greedy by default).
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import Any

from rft_core import rewards
from rft_core.data.task import Task
from rft_core.errors import ConfigError
from rft_core.experience import Experience
from rft_core.rollout.base import AuxiliaryModel, Generation, RolloutEngine
from rft_core.workflows.base import register, taskset_path
from rft_core.workflows.math import MathWorkflow

log = logging.getLogger(__name__)

ANSWER_FORMAT = (
    "Solution format requirement: first think about the reasoning process, then give the final "
    "answer; the reasoning is enclosed in <think> </think> tags and the answer in <answer> "
    "</answer> tags, i.e. <think> reasoning here </think> <answer> answer here </answer>."
)
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NUMBER_RE = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def parse_ruler_scores(reply: str, n: int) -> list[float] | None:
    """The ``n`` scores of the last ``[...]`` in ``reply``, each clipped to [0, 1]; None when
    there is no such list or it does not hold exactly ``n`` plain numbers."""
    end = reply.rfind("]")
    start = reply.rfind("[", 0, end) if end != -1 else -1
    if start == -1:
        return None
    items = [item.strip() for item in reply[start + 1 : end].split(",")]
    if len(items) != n or not all(_NUMBER_RE.fullmatch(item) for item in items):
        return None
    return [min(1.0, max(0.0, float(item))) for item in items]


def final_answer(response: str, limit: int = 12) -> str:
    """The text of the response's last ``<answer>…</answer>`` (stripped, at most ``limit``
    characters), ``-`` when there is none: the ``{answers}`` field of a ``judge_prompt``."""
    found = _ANSWER_RE.findall(response)
    text = " ".join(found[-1].split())[:limit] if found else ""
    return text or "-"


def ruler_messages(
    question: str,
    responses: list[str],
    *,
    rubric: list[Any] | None = None,
    system_prompt: str | None = None,
    prompt: str | None = None,
) -> list[dict[str, str]]:
    """The judge's conversation for one group (``rubric``: the medicine/rubric variant;
    ``system_prompt`` / ``prompt``: templates replacing the default ones, see the module doc)."""
    n = len(responses)
    if prompt is not None:
        solutions = "\n".join(f"{i + 1}: {r}" for i, r in enumerate(responses))
        fields = {
            "question": question,
            "solutions": solutions,
            "answers": "\n".join(f"{i + 1}: {final_answer(r)}" for i, r in enumerate(responses)),
            "n": n,
            "rubric": rubric_text(rubric or []),
        }
        user = prompt.format(**fields)
        system = (system_prompt or "").format(**fields)
        return [
            *([{"role": "system", "content": system}] if system else []),
            {"role": "user", "content": user},
        ]
    what = "a question, {n} candidate solutions{extra}".format(
        n=n, extra=" and rubrics with weights" if rubric is not None else ""
    )
    system = (
        f"You are a fair judge. The user gives {what}. Compare the solutions, judge how well "
        "each resolves the question"
        + (" according to the rubrics" if rubric is not None else "")
        + ", and give each a score in the range [0, 1]."
    )
    solutions = "\n\n".join(f"Candidate solution {i + 1}: {r}" for i, r in enumerate(responses))
    parts = [f"Question: {question}\n\n{ANSWER_FORMAT}", solutions]
    if rubric is not None:
        parts.append(rubric_text(rubric))
    user = (
        "Below are a question and several candidate solutions.\n\n"
        + "\n\n".join(parts)
        + "\n\nScore each solution in [0, 1] by how well it solves the question. You may "
        "compare them and reason briefly first. End your reply with the list of scores, "
        f"[score of solution 1, ..., score of solution {n}]."
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def rubric_text(rubric: list[Any]) -> str:
    """The rubric list as the judge reads it; a row without rubrics says so."""
    if not rubric:
        return "Rubrics are not provided."
    lines = []
    for i, item in enumerate(rubric):
        if isinstance(item, dict):
            lines.append(f"Rubric {i} (weight: {item.get('weight')}): {item.get('description')}")
        else:
            lines.append(f"Rubric {i}: {item}")
    return "Rubric (checklist and weights):\n" + "\n".join(lines)


def judge_of(workflow: Any, task: Task) -> AuxiliaryModel:
    """The auxiliary model ``workflow_args.judge_model`` names; a ConfigError when absent."""
    index = int(workflow.args.get("judge_model", 0))
    models = workflow.auxiliary_models
    if not 0 <= index < len(models):
        name = type(workflow).__name__
        raise ConfigError(
            f"{taskset_path(task)}.workflow_args.judge_model"
            if models
            else "explorer.auxiliary_models",
            f"{name} needs a judge: judge_model {index} but {len(models)} auxiliary model(s); "
            "add one under explorer.auxiliary_models (model_path: <judge model>)",
            value=index,
        )
    return models[index]


def log_failed_judgement(workflow: str, task: Task, reply: str) -> None:
    head = " ".join(reply.split())[:120]
    log.warning(
        "%s: judge reply for task %s[%d] holds no usable scores, fallback used: %r",
        workflow,
        task.taskset,
        task.index,
        head,
    )


@register("math_ruler_workflow")
@register("async_math_ruler_workflow")  # Trinity's async variant (batched here)
class MathRULERWorkflow(MathWorkflow):
    """See the module doc."""

    default_reward_fn = "math_reward"  # the gold reward, logged only
    takes_args = ("judge_model", "fallback_score", "judge_prompt", "judge_system_prompt")
    with_rubric = False
    name = "math_ruler_workflow"

    def __init__(self, args: dict[str, Any] | None = None, **models: Any) -> None:
        super().__init__(args, **models)
        self.fallback_score = float(self.args.get("fallback_score", 0.0))
        self._replies: list[str] = []

    def check(self, task: Task) -> str:
        judge_of(self, task)
        return "" if self.with_rubric else super().check(task)

    def judge_conversation(self, task: Task, responses: list[str]) -> list[dict[str, str]]:
        rubric = (task.raw.get("rubric") or []) if self.with_rubric else None
        return ruler_messages(
            task.prompt,
            responses,
            rubric=rubric,
            system_prompt=self.args.get("judge_system_prompt"),
            prompt=self.args.get("judge_prompt"),
        )

    def score_batch(
        self, tasks: list[Task], reward_fns: list[str], generations: list[list[Generation]]
    ) -> list[list[dict[str, float]]]:
        if not tasks:
            return []
        judge = judge_of(self, tasks[0])
        conversations = [
            self.judge_conversation(task, [g.text for g in gens])
            for task, gens in zip(tasks, generations, strict=True)
        ]
        outputs = judge.engine.chat(conversations, replace(judge.sampling, n=1))
        self._replies = [gens[0].text for gens in outputs]
        scores = []
        for task, fn, gens, reply in zip(
            tasks, reward_fns, generations, self._replies, strict=True
        ):
            parsed = parse_ruler_scores(reply, len(gens))
            if parsed is None:
                log_failed_judgement(self.name, task, reply)
            task_scores = []
            for i, g in enumerate(gens):
                parts = {
                    "ruler_score": self.fallback_score if parsed is None else parsed[i],
                    "judge_success": float(parsed is not None),
                }
                if fn and task.truth is not None:
                    gold = rewards.score(
                        fn,
                        g.text,
                        task.truth,
                        task.reward_fn_args,
                        response_length=len(g.response_ids),
                    )
                    parts.update({f"gold_{k}": v for k, v in gold.items()})
                    parts["gold_reward"] = sum(gold.values())
                    if parsed is not None and "accuracy" in gold:
                        # did the judge call this answer right (score >= 0.5) as the truth does?
                        parts["judge_agreement"] = float(
                            (parsed[i] >= 0.5) == (gold["accuracy"] >= 1.0)
                        )
                task_scores.append(parts)
            scores.append(task_scores)
        return scores

    def run_batch(
        self, tasks: list[Task], engine: RolloutEngine, repeat_times: int
    ) -> list[Experience]:
        experiences = super().run_batch(tasks, engine, repeat_times)
        for i, exp in enumerate(experiences):
            exp.reward = exp.metrics["ruler_score"]  # the judge's score alone is trained on
            exp.info["judge_reply"] = self._replies[i // repeat_times]
            exp.info["judge_parsed"] = bool(exp.metrics["judge_success"])
            exp.info["reward_fn"] = "ruler"
        return experiences


@register("medicine_ruler_workflow")
class MedicineRULERWorkflow(MathRULERWorkflow):
    """RULER with the row's ``rubric`` column shown to the judge (see the module doc)."""

    default_reward_fn = None
    takes_args = MathRULERWorkflow.takes_args
    uses_reward_fn = False
    with_rubric = True
    name = "medicine_ruler_workflow"
