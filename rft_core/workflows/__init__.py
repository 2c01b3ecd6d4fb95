"""Workflows: how tasks become scored experiences. A registry of workflow classes selected by
``default_workflow_type`` (or per row through ``format.workflow_key``), plus the explorer's
rollout/eval metric helpers.

    from rft_core import workflows

    workflow = workflows.get(task.workflow)(task.workflow_args)
    experiences = workflow.run_batch(tasks, engine, repeat_times)
    metrics = workflows.rollout_metrics(experiences)
"""

from __future__ import annotations

from collections.abc import Callable

from rft_core.registry import Registry
from rft_core.workflows.base import Workflow
from rft_core.workflows.metrics import eval_metrics, rollout_metrics

WORKFLOW_PATH = "buffer.explorer_input.taskset.default_workflow_type"

_REGISTRY: Registry[type[Workflow]] = Registry("workflow", WORKFLOW_PATH)


def register(name: str) -> Callable[[type[Workflow]], type[Workflow]]:
    """Class decorator registering a Workflow subclass under ``name``."""
    return _REGISTRY.register(name)


def get(name: str, *, path: str | None = None) -> type[Workflow]:
    """The workflow class registered as ``name``; unknown names raise a ConfigError listing the
    registered ones."""
    return _REGISTRY.get(name, path=path)


def names() -> list[str]:
    return _REGISTRY.names()


# Built-in workflows register themselves on import.
from rft_core.workflows import math as _math_workflow  # noqa: E402,F401
from rft_core.workflows import simple as _simple_workflow  # noqa: E402,F401

__all__ = ["Workflow", "eval_metrics", "get", "names", "register", "rollout_metrics"]
