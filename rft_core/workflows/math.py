"""``math_workflow``: GSM8K-style question answering with reasoning in ``<think>`` and the final
answer in ``<answer>``, scored by ``math_reward`` (accuracy + format) unless the task names
another reward function."""

from __future__ import annotations

from rft_core.data.task import Task
from rft_core.workflows.base import Workflow, register

THINK_ANSWER_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The User asks a question and the Assistant "
    "solves it. The Assistant first thinks about the reasoning process and then gives the "
    "answer. The reasoning is enclosed in <think> </think> tags and the answer in "
    "<answer> </answer> tags, i.e. <think> reasoning here </think> <answer> answer here "
    "</answer>."
)


@register("math_workflow")
@register("async_math_workflow")  # Trinity's async variant: every task is batched here
class MathWorkflow(Workflow):
    """System prompt: the taskset's ``format.system_prompt`` when given ("" for none), else
    :data:`THINK_ANSWER_SYSTEM_PROMPT`; the question is the user turn."""

    default_reward_fn = "math_reward"
    takes_args = ()

    def messages(self, task: Task) -> list[dict[str, str]]:
        system = THINK_ANSWER_SYSTEM_PROMPT if task.system_prompt is None else task.system_prompt
        conversation = [{"role": "system", "content": system}] if system else []
        conversation.append({"role": "user", "content": task.prompt})
        return conversation
