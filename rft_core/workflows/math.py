"""``math_workflow``: GSM8K-style question answering with reasoning in ``<think>`` and the final
answer in ``<answer>``, scored by ``math_reward`` (accuracy + format) unless the task names
another reward function; ``math_boxed_workflow``: Trinity-RFT's variant with the answer in
``\\boxed{}`` (its mix_chord example uses it)."""

from __future__ import annotations

from rft_core import rewards
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
class MathWorkflow(Workflow):
    """System prompt: the taskset's ``format.system_prompt`` when given ("" for none), else
    :data:`THINK_ANSWER_SYSTEM_PROMPT`; the question is the user turn."""

    default_reward_fn = "math_reward"

    def messages(self, task: Task) -> list[dict[str, str]]:
        system = THINK_ANSWER_SYSTEM_PROMPT if task.system_prompt is None else task.system_prompt
        conversation = [{"role": "system", "content": system}] if system else []
        conversation.append({"role": "user", "content": task.prompt})
        return conversation


BOXED_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
BOXED_THINK_SYSTEM_PROMPT = (
    "You are a helpful assistant that solves math problems. First think about the reasoning "
    "process, enclosed in <think> </think> tags, i.e. <think> reasoning here </think>, then "
    "give the final answer in \\boxed{} as a closed-form result."
)


@register("math_boxed_workflow")
class MathBoxedWorkflow(Workflow):
    """Trinity-RFT's ``math_boxed_workflow``: the answer goes in ``\\boxed{}``, scored by
    ``math_boxed_reward``. ``workflow_args``: ``with_think`` (ask for a ``<think>`` block and
    take ``format_score_coef``, default 0.1, off a response without one). System prompt: the
    taskset's ``format.system_prompt`` when given, else one asking for the box (and the think
    block). Trinity's ``use_base`` (a plain-text prompt for base models) is not supported: the
    chat template is always used."""

    default_reward_fn = "math_boxed_reward"

    def messages(self, task: Task) -> list[dict[str, str]]:
        if task.system_prompt is not None:
            system = task.system_prompt
        elif self.args.get("with_think", False):
            system = BOXED_THINK_SYSTEM_PROMPT
        else:
            system = BOXED_SYSTEM_PROMPT
        conversation = [{"role": "system", "content": system}] if system else []
        conversation.append({"role": "user", "content": task.prompt})
        return conversation

    def score(self, task: Task, response: str, reward_fn: str) -> dict[str, float]:
        if reward_fn != "math_boxed_reward":
            return super().score(task, response, reward_fn)
        # as in Trinity, the think check's settings come from workflow_args
        args = {
            "with_think": bool(self.args.get("with_think", False)),
            "format_score_coef": float(self.args.get("format_score_coef", 0.1)),
            **task.reward_fn_args,
        }
        return rewards.score(reward_fn, response, task.truth, args)
