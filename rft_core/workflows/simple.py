"""``simple_workflow``: the prompt as the user turn (after the taskset's system prompt, if any),
scored by the reward function the task names (required)."""

from __future__ import annotations

from rft_core.data.task import Task
from rft_core.workflows.base import Workflow, register


@register("simple_workflow")
@register("async_simple_workflow")  # Trinity's async variant: every task is batched here
class SimpleWorkflow(Workflow):
    default_reward_fn = None
    takes_args = ()

    def messages(self, task: Task) -> list[dict[str, str]]:
        conversation = []
        if task.system_prompt:
            conversation.append({"role": "system", "content": task.system_prompt})
        conversation.append({"role": "user", "content": task.prompt})
        return conversation
