"""``countdown_workflow``: the Countdown game (reach a target with each given number used once),
scored by ``countdown_reward`` unless the task names another reward function.

Trinity-RFT runs Countdown through ``math_workflow`` on a taskset whose question already holds
the whole instruction and whose answer is the JSON truth; that works here too (``math_workflow``
+ ``default_reward_fn_type: countdown_reward``). This workflow also reads the raw columns of
datasets such as ``Jiayi-Pan/Countdown-Tasks-3to4`` (``nums``, ``target``): when a row has both
it writes TinyZero's instruction from them and the truth as ``{"target", "numbers"}`` JSON;
otherwise the row's prompt and truth are used as they are.

``workflow_args``: ``numbers_key`` ("nums"), ``target_key`` ("target").
"""

from __future__ import annotations

import json
from typing import Any

from rft_core import rewards
from rft_core.data.task import Task
from rft_core.workflows.base import Workflow, register

COUNTDOWN_SYSTEM_PROMPT = (
    "You are a helpful assistant. You first think about the reasoning process in the mind and "
    "then provide the user with the answer."
)


def countdown_instruction(numbers: list[int], target: int) -> str:
    """TinyZero's Countdown instruction for ``numbers`` and ``target``."""
    return (
        f"Using the numbers {numbers}, create an equation that equals {target}. You can use "
        "basic arithmetic operations (+, -, *, /) and each number can only be used once. Show "
        "your work in <think> </think> tags. And return the final answer in <answer> </answer> "
        "tags, for example <answer> (1 + 2) / 3 </answer>."
    )


@register("countdown_workflow")
class CountdownWorkflow(Workflow):
    """System prompt: the taskset's ``format.system_prompt`` when given ("" for none), else
    :data:`COUNTDOWN_SYSTEM_PROMPT`; the user turn is the instruction (see the module doc)."""

    default_reward_fn = "countdown_reward"
    takes_args = ("numbers_key", "target_key")

    def __init__(self, args: dict[str, Any] | None = None, **engines: Any) -> None:
        super().__init__(args, **engines)
        self.numbers_key = str(self.args.get("numbers_key", "nums"))
        self.target_key = str(self.args.get("target_key", "target"))

    def _game(self, task: Task) -> tuple[list[int], int] | None:
        numbers, target = task.raw.get(self.numbers_key), task.raw.get(self.target_key)
        if numbers is None or target is None:
            return None
        return [int(n) for n in numbers], int(target)

    def messages(self, task: Task) -> list[dict[str, str]]:
        system = COUNTDOWN_SYSTEM_PROMPT if task.system_prompt is None else task.system_prompt
        game = self._game(task)
        user = task.prompt if game is None else countdown_instruction(*game)
        conversation = [{"role": "system", "content": system}] if system else []
        conversation.append({"role": "user", "content": user})
        return conversation

    def truth(self, task: Task) -> str | None:
        game = self._game(task)
        if game is None:
            return task.truth
        return json.dumps({"target": game[1], "numbers": game[0]})

    def score(
        self, task: Task, response: str, reward_fn: str, *, response_length: int | None = None
    ) -> dict[str, float]:
        return rewards.score(
            reward_fn,
            response,
            self.truth(task),
            task.reward_fn_args,
            response_length=response_length,
        )
