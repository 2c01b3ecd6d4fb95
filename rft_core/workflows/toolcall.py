"""``toolcall_workflow`` (Trinity-RFT's ``ToolCallWorkflow``, ``trinity/common/workflows/
customized_toolcall_workflows.py``, after NVlabs/Tool-N1): one reply of function calls per task,
scored by ``toolcall_reward`` against the row's reference calls.

The prompt is built from the row's own columns, as Trinity does (ToolACE's layout): ``tools`` (a
JSON list of function schemas), ``raw_system`` (the system text) and ``conversations`` (turns of
``{"from": human|user|gpt|assistant|observation|tool|function_call, "value": ...}``). The system
turn is ``raw_system`` followed by the tool list and the Tool-N1 instructions (think in
``<think>``, then the calls as a JSON list in ``<tool_call>``). The truth is the ``answer``
column: the validator points ``format.prompt_key`` / ``response_key`` at ``conversations`` /
``answer`` when the taskset leaves them at their defaults (``WORKFLOW_FORMAT_DEFAULTS`` in
``rft_core.config.registered``).
"""

from __future__ import annotations

import json
from typing import Any

from rft_core.data.task import Task
from rft_core.errors import DataError
from rft_core.workflows.base import Workflow, register

FORMAT_DEFAULTS = {"prompt_key": "conversations", "response_key": "answer"}

TOOL_INSTRUCTIONS = """# Tool

<tools>
{tools}
</tools>

In each action step, you MUST:
1. Think about the reasoning process in the mind and enclose your reasoning within <think> </think> XML tags.
2. Then, provide a JSON list of the function calls, each with its name and arguments, within <tool_call></tool_call> XML tags, e.g. <tool_call>[{{"name": <function-name>, "arguments": <args-json-object>}}, ...]</tool_call>
3. Put the reasoning and the tool call together in one single reply, with arguments of the right types.
"""

_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "observation": "tool",
    "tool": "tool",
}


def _column(task: Task, name: str) -> Any:
    if name not in task.raw:
        raise DataError(
            f"toolcall_workflow: row {task.index} of taskset {task.taskset!r} has no {name!r} "
            "column (it needs tools, raw_system, conversations and answer, ToolACE's layout)"
        )
    value = task.raw[name]
    return json.loads(value) if isinstance(value, str) and name != "raw_system" else value


@register("toolcall_workflow")
@register("tool_call_workflow")  # the name in Trinity's registry; its example writes the first
class ToolCallWorkflow(Workflow):
    default_reward_fn = "toolcall_reward"
    takes_args = ()

    def messages(self, task: Task) -> list[dict[str, str]]:
        tools = "\n".join(
            json.dumps({"type": "function", "function": tool}) for tool in _column(task, "tools")
        )
        system = str(_column(task, "raw_system")) + TOOL_INSTRUCTIONS.format(tools=tools)
        conversation = [{"role": "system", "content": system}]
        for turn in _column(task, "conversations"):
            source, value = turn.get("from"), turn.get("value")
            if source == "function_call":
                conversation.append({"role": "assistant", "content": json.dumps(value)})
            elif source in _ROLES:
                conversation.append({"role": _ROLES[source], "content": str(value)})
            else:
                raise DataError(
                    f"toolcall_workflow: row {task.index} of taskset {task.taskset!r}: a "
                    f"conversation turn from {source!r} (expected one of "
                    f"{', '.join([*_ROLES, 'function_call'])})"
                )
        return conversation
