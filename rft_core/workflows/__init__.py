"""Workflows: how tasks become scored experiences. A registry of workflow classes selected by
``default_workflow_type`` (or per row through ``format.workflow_key``), plus the explorer's
rollout/eval metric helpers.

    from rft_core import workflows

    workflow = workflows.get(task.workflow)(task.workflow_args)
    experiences = workflow.run_batch(tasks, engine, repeat_times)
    metrics = workflows.rollout_metrics(experiences)
"""

from rft_core.workflows import countdown as _countdown_workflow  # noqa: F401  (built-ins register)
from rft_core.workflows import frozen_lake as _frozen_lake_workflow  # noqa: F401
from rft_core.workflows import learn2ask as _learn2ask_workflow  # noqa: F401
from rft_core.workflows import math as _math_workflow  # noqa: F401
from rft_core.workflows import math_boxed as _math_boxed_workflow  # noqa: F401
from rft_core.workflows import math_rm as _math_rm_workflow  # noqa: F401
from rft_core.workflows import react_math as _react_math_workflow  # noqa: F401
from rft_core.workflows import rubric_judge as _rubric_judge_workflow  # noqa: F401
from rft_core.workflows import ruler as _ruler_workflows  # noqa: F401
from rft_core.workflows import ruler_trainable as _trainable_ruler_workflow  # noqa: F401
from rft_core.workflows import simple as _simple_workflow  # noqa: F401
from rft_core.workflows import toolcall as _toolcall_workflow  # noqa: F401
from rft_core.workflows.base import (
    WORKFLOWS,
    Workflow,
    get,
    names,
    register,
    workflow_args_table,
)
from rft_core.workflows.metrics import eval_metrics, rollout_metrics
from rft_core.workflows.multi_turn import Environment, MultiTurnWorkflow, StepResult

__all__ = [
    "WORKFLOWS",
    "Environment",
    "MultiTurnWorkflow",
    "StepResult",
    "Workflow",
    "eval_metrics",
    "get",
    "names",
    "register",
    "rollout_metrics",
    "workflow_args_table",
]
