"""``math_boxed_workflow``: math questions answered in ``\\boxed{}``, scored by
``math_boxed_reward`` unless the task names another reward function (Trinity-RFT's
``MathBoxedWorkflow``).

``workflow_args`` (Trinity's keys and defaults):

- ``use_base`` (False): send ``System:<prompt>\\nUser:\\n<question>\\nAssistant:\\n`` as raw
  text, without the chat template, for base models;
- ``with_think`` (False): ask for reasoning in ``<think> </think>`` and take
  ``format_score_coef`` off responses without one such block;
- ``format_score_coef`` (0.1).

``with_think`` and ``format_score_coef`` reach the reward function when it accepts them and
``reward_fn_args`` does not set them.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from rft_core import rewards
from rft_core.data.task import Task
from rft_core.workflows.base import Workflow, register

log = logging.getLogger(__name__)

BOXED_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
BOXED_THINK_SYSTEM_PROMPT = (
    "You are a helpful assistant that solves MATH problems. You should first think about the "
    "reasoning process in mind and then provide the user with the answer. You should present "
    "your reasoning process using the format: <think>\\n ...your reasoning process here... "
    "</think>\\n first. You should always include your final answer in \\boxed{} as "
    "closed-form results."
)


@register("math_boxed_workflow")
@register("async_math_boxed_workflow")  # Trinity's async variant (batched here)
class MathBoxedWorkflow(Workflow):
    """System prompt: the taskset's ``format.system_prompt`` when given ("" for none), else
    :data:`BOXED_SYSTEM_PROMPT` (:data:`BOXED_THINK_SYSTEM_PROMPT` with ``with_think``)."""

    default_reward_fn = "math_boxed_reward"
    # others are a load-time warning (rft_core.config.registered): reward settings such as
    # DAPO's overlong penalty go in reward_fn_args, with default_reward_fn_type: math_dapo_reward
    takes_args = ("use_base", "with_think", "format_score_coef")

    def __init__(self, args: dict[str, Any] | None = None, **engines: Any) -> None:
        super().__init__(args, **engines)
        self.use_base = bool(self.args.get("use_base", False))
        self.with_think = bool(self.args.get("with_think", False))
        self.format_score_coef = float(self.args.get("format_score_coef", 0.1))

    def system_prompt(self, task: Task) -> str:
        if task.system_prompt is not None:
            return task.system_prompt
        return BOXED_THINK_SYSTEM_PROMPT if self.with_think else BOXED_SYSTEM_PROMPT

    def messages(self, task: Task) -> list[dict[str, str]]:
        system = self.system_prompt(task)
        conversation = [{"role": "system", "content": system}] if system else []
        conversation.append({"role": "user", "content": task.prompt})
        return conversation

    def prompt_text(self, task: Task) -> str | None:
        if not self.use_base:
            return None
        system = self.system_prompt(task)
        head = f"System:{system}\n" if system else ""
        return f"{head}User:\n{task.prompt}\nAssistant:\n"

    def score(
        self, task: Task, response: str, reward_fn: str, *, response_length: int | None = None
    ) -> dict[str, float]:
        accepted = inspect.signature(rewards.get(reward_fn)).parameters
        args = {
            key: value
            for key, value in (
                ("with_think", self.with_think),
                ("format_score_coef", self.format_score_coef),
            )
            if key in accepted
        }
        args.update(task.reward_fn_args)
        return rewards.score(reward_fn, response, task.truth, args, response_length=response_length)
