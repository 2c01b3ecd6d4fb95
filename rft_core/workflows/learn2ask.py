"""``learn2ask_workflow``: a doctor model learns when to keep asking a patient questions and when
to stop, rewarded by a judge model. Semantics of Trinity-RFT's
``examples/learn_to_ask/workflow/workflow_learn2ask.py`` (``Learn2AskWorkflow``; its prompts in
``prompt_learn2ask.py``; config ``examples/learn_to_ask/train.yaml``), on the judge engine of
``explorer.auxiliary_models``. Prompts are reworded here with the same instructions.

A row: the dialogue so far (the ``prompt_key`` column: a list of ``{"role", "content"}``
messages, or one string as the patient's turn), ``decision_truth`` ("continue" or "stop";
"continue" when absent) and ``info_truth`` (what the doctor still needs to learn; "None" when
absent). The policy replies with one question, or exactly ``<stop />`` when it knows enough.

Reward (``R_s`` decision, ``R_a`` content, ``P`` format):

- the reply's decision is "stop" when it contains ``<stop />``, else "continue"; wrong decision:
  ``R_s = R_a = P = 0``;
- right decision "continue": the judge reads the dialogue (``patient: …`` / ``doctor: …``
  lines, the reply last) with ``info_truth`` as its reference and answers with
  ``<format_score>`` (1 one question, 0.5 two, 0 more) and ``<content_score>`` (1 asks about the
  reference, 0.5 relevant, 0 not) tags: ``P``, ``R_a`` (a tag missing or not a number: 0, and
  ``judge_success`` 0);
- right decision "stop": ``R_a = 1``, ``P = 1`` when the reply is exactly ``<stop />`` else 0.

Final reward by ``workflow_args.train_mode``: "Ra+Rs" (default): ``R_s * (1 + 2 R_a) + P``, or
with ``fusion_mode: sum`` ``R_s + R_a + P``; "Ra": ``2 R_a + P`` (the prompt then does not offer
``<stop />``); "Rs": ``3 R_s + P``. Parts logged: ``action_score``, ``content_score``,
``format_score``, ``judge_success`` (1 when no judge call was needed), ``learn2ask_reward``.
Trinity retries a failed judge call five times; a local engine call does not fail that way.
``default_reward_fn_type`` is not used (Trinity's example sets math_reward, which it ignores).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from rft_core.data.task import Task
from rft_core.errors import ConfigError
from rft_core.experience import Experience
from rft_core.rollout.base import Generation, RolloutEngine
from rft_core.workflows.base import Workflow, register
from rft_core.workflows.ruler import judge_of, log_failed_judgement

TRAIN_MODES = ("Ra+Rs", "Ra", "Rs")
FUSION_MODES = ("default", "sum")
STOP = "<stop />"

_ROLLOUT_HEAD = (
    "# Task\nYou are a medical assistant. Read the conversation so far and continue the "
    "medical inquiry in English.\n\n## Guidelines\n- Each reply asks exactly one clear, short "
    "medical question offering 2 or 3 answer choices.\n- Never repeat an earlier question.\n"
    "- Reply in a single sentence.\n"
)
ROLLOUT_PROMPT = _ROLLOUT_HEAD + (
    f"- Once you know enough to suggest a medication, reply with only: {STOP}\n"
)
ROLLOUT_PROMPT_RA = _ROLLOUT_HEAD
JUDGE_PROMPT = """# Task
You are an evaluation assistant. The user gives a dialogue between a doctor and a patient. \
Evaluate the doctor's LAST message only.

# Grading
## Format score
- 1.0: the last message asks exactly one question.
- 0.5: it asks two questions.
- 0.0: it asks three or more.
## Content score
- 1.0: the question(s) directly ask about an item of the reference information.
- 0.5: they are highly relevant to, but do not directly ask about, an item of it.
- 0.0: they are irrelevant to every item of it.

# Reference information
{info}

# Output
<think>your short reasoning about both scores</think>
<format_score>the format score as a number, e.g. 1.0</format_score>
<content_score>the content score as a number, e.g. 0.5</content_score>
Write exactly these three tags and nothing else."""

_TAG_RE = re.compile(r"<(\w+)>(.*?)</\1>", re.DOTALL)


def parse_judge_tags(reply: str) -> tuple[float, float] | None:
    """(format_score, content_score) from the judge's tags; None when a tag is missing or not
    a number."""
    tags = dict(_TAG_RE.findall(reply))
    try:
        return float(tags["format_score"].strip()), float(tags["content_score"].strip())
    except (KeyError, ValueError):
        return None


def fuse(action: float, content: float, fmt: float, train_mode: str, fusion_mode: str) -> float:
    """The final reward of the three parts (see the module doc)."""
    if train_mode == "Ra":
        return 2 * content + fmt
    if train_mode == "Rs":
        return 3 * action + fmt
    if fusion_mode == "sum":
        return action + content + fmt
    return action * (1 + 2 * content) + fmt


def dialogue(task: Task) -> list[dict[str, str]]:
    """The row's conversation: the prompt column's message list (as read), else the prompt as
    the patient's one turn."""
    for value in task.raw.values():
        if isinstance(value, list) and str(value) == task.prompt:
            return [{"role": str(m["role"]), "content": str(m["content"])} for m in value]
    return [{"role": "user", "content": task.prompt}]


def transcript(messages: list[dict[str, str]]) -> str:
    speaker = {"user": "patient", "assistant": "doctor"}
    return "".join(
        f"{speaker[m['role']]}: {m['content']}\n" for m in messages if m["role"] in speaker
    )


@register("learn2ask_workflow")
class Learn2AskWorkflow(Workflow):
    """See the module doc."""

    takes_args = ("train_mode", "fusion_mode", "judge_model")
    uses_reward_fn = False

    def __init__(self, args: dict[str, Any] | None = None, **models: Any) -> None:
        super().__init__(args, **models)
        self.train_mode = str(self.args.get("train_mode", "Ra+Rs"))
        self.fusion_mode = str(self.args.get("fusion_mode", "default"))
        for key, value, allowed in (
            ("train_mode", self.train_mode, TRAIN_MODES),
            ("fusion_mode", self.fusion_mode, FUSION_MODES),
        ):
            if value not in allowed:
                raise ConfigError(
                    f"buffer.explorer_input.taskset.workflow_args.{key}",
                    f"{value!r} is not one of {', '.join(allowed)}",
                    value=value,
                    allowed=list(allowed),
                )
        self._replies: list[str | None] = []

    def messages(self, task: Task) -> list[dict[str, str]]:
        system = ROLLOUT_PROMPT_RA if self.train_mode == "Ra" else ROLLOUT_PROMPT
        return [{"role": "system", "content": system}, *dialogue(task)]

    def check(self, task: Task) -> str:
        judge_of(self, task)
        return ""

    def score_batch(
        self, tasks: list[Task], reward_fns: list[str], generations: list[list[Generation]]
    ) -> list[list[dict[str, float]]]:
        if not tasks:
            return []
        judge = judge_of(self, tasks[0])
        to_judge: list[tuple[int, int]] = []  # (task, response) pairs the judge must read
        conversations = []
        for t, (task, gens) in enumerate(zip(tasks, generations, strict=True)):
            truth = str(task.raw.get("decision_truth", "continue"))
            for r, g in enumerate(gens):
                if truth == "continue" and STOP not in g.text:
                    to_judge.append((t, r))
                    history = [*dialogue(task), {"role": "assistant", "content": g.text}]
                    info = str(task.raw.get("info_truth", "None"))
                    conversations.append(
                        [
                            {"role": "system", "content": JUDGE_PROMPT.format(info=info)},
                            {"role": "user", "content": transcript(history)},
                        ]
                    )
        outputs = (
            judge.engine.chat(conversations, replace(judge.sampling, n=1)) if conversations else []
        )
        judged = {pair: out[0].text for pair, out in zip(to_judge, outputs, strict=True)}
        self._replies = []
        scores = []
        for t, (task, gens) in enumerate(zip(tasks, generations, strict=True)):
            truth = str(task.raw.get("decision_truth", "continue"))
            task_scores = []
            for r, g in enumerate(gens):
                decision = "stop" if STOP in g.text else "continue"
                reply = judged.get((t, r))
                self._replies.append(reply)
                success = 1.0
                if decision != truth:
                    action = content = fmt = 0.0
                elif truth == "continue":
                    action = 1.0
                    parsed = parse_judge_tags(reply or "")
                    if parsed is None:
                        log_failed_judgement("learn2ask_workflow", task, reply or "")
                        success, (fmt, content) = 0.0, (0.0, 0.0)
                    else:
                        fmt, content = parsed
                else:
                    action, content, fmt = 1.0, 1.0, float(g.text == STOP)
                task_scores.append(
                    {
                        "action_score": action,
                        "content_score": content,
                        "format_score": fmt,
                        "judge_success": success,
                        "learn2ask_reward": fuse(
                            action, content, fmt, self.train_mode, self.fusion_mode
                        ),
                    }
                )
            scores.append(task_scores)
        return scores

    def run_batch(
        self, tasks: list[Task], engine: RolloutEngine, repeat_times: int
    ) -> list[Experience]:
        experiences = super().run_batch(tasks, engine, repeat_times)
        for exp, reply in zip(experiences, self._replies, strict=True):
            exp.reward = exp.metrics["learn2ask_reward"]
            exp.info["judge_reply"] = reply
            exp.info["reward_fn"] = "learn2ask"
        return experiences
