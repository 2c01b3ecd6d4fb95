"""A task: one row of a taskset, resolved against the taskset's ``format`` and defaults, ready for
a workflow. Tasksets (``rft_core.data``) produce Tasks; workflows (``rft_core.workflows``) consume
them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Task:
    index: int  # position in the taskset (resumable read offsets count these)
    taskset: str  # taskset name from the config
    raw: dict[str, Any]  # the row as read
    prompt: str  # row[format.prompt_key]
    truth: str | None = None  # row[format.response_key]
    system_prompt: str | None = None  # format.system_prompt (None = the workflow's default)
    reply_prefix: str | None = None  # format.reply_prefix: the reply starts with it (prompt end)
    workflow: str = "math_workflow"  # row[format.workflow_key] or default_workflow_type
    reward_fn: str | None = None  # row[format.reward_fn_key] or default_reward_fn_type
    rollout_args: dict[str, Any] = field(
        default_factory=dict
    )  # temperature/top_p/top_k/max_tokens/n
    workflow_args: dict[str, Any] = field(default_factory=dict)
    reward_fn_args: dict[str, Any] = field(default_factory=dict)
    is_eval: bool = False
    # where the taskset, the workflow and the reward fn were given (for error messages): the
    # taskset's YAML path, then a key under it or the row's column
    yaml_path: str = "buffer.explorer_input.taskset"
    workflow_from: str = "default_workflow_type"
    reward_fn_from: str = "default_reward_fn_type"
