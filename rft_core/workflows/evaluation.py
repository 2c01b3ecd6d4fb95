"""Running tasks through their workflows on an engine, and the held-out eval built on it.

``run_workflows`` groups a batch of tasks by workflow and runs each group in one batched
``run_batch`` call: the explorer's rollouts and every eval go through it. ``evaluate_tasksets``
is the held-out eval itself: every task of each eval taskset, ``repeat_times`` (or
``rollout_args.n``) samples at the taskset's own rollout args, scored into
``eval/<taskset>/accuracy/mean@k`` and the rest of ``workflows.eval_metrics``. The explorer
evaluates with its rollout engine (RFT stages, ``mode: bench``); the trainer of an SFT stage with
an engine over its own weights (``rft_core.trainer.held_out_eval``), so both write the same
metrics from the same code.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from rft_core.data import TasksetReader
from rft_core.data.task import Task
from rft_core.data.taskset import Taskset
from rft_core.experience import Experience
from rft_core.rollout.base import AuxiliaryModel
from rft_core.workflows.base import get
from rft_core.workflows.metrics import eval_metrics


def run_workflows(
    tasks: list[Task],
    engine: Any,
    repeat_times: int,
    *,
    auxiliary_models: Sequence[AuxiliaryModel] = (),
    step_wise: bool = False,
    timings: dict[str, float] | None = None,
) -> list[Experience]:
    """Every task's experiences, ``repeat_times`` a task; ``step_wise`` (training with a
    turn-level advantage fn, multi_step_grpo / gigpo): multi-turn workflows emit one experience
    per turn. ``timings`` adds up the workflows' seconds per part (rollout, reward)."""
    by_workflow: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        by_workflow[task.workflow].append(task)
    experiences: list[Experience] = []
    for name, group in by_workflow.items():
        first = group[0]
        path = f"{first.yaml_path}.{first.workflow_from}"
        workflow = get(name, path=path)(first.workflow_args)
        # set after construction: subclasses whose __init__ takes only args still work
        workflow.auxiliary_models = list(auxiliary_models)
        workflow.step_wise = step_wise
        experiences.extend(workflow.run_batch(group, engine, repeat_times))
        if timings is not None:
            for part, seconds in (getattr(workflow, "timings", None) or {}).items():
                timings[part] = timings.get(part, 0.0) + seconds
    return experiences


def evaluate_tasksets(
    evals: Sequence[Taskset],
    engine: Any,
    *,
    auxiliary_models: Sequence[AuxiliaryModel] = (),
    prefix: str = "eval",
) -> dict[str, float]:
    """The held-out metrics of ``engine``'s policy on every task of each taskset in ``evals``,
    named ``<prefix>/<taskset>/...`` (``eval`` or ``bench``)."""
    metrics: dict[str, float] = {}
    for taskset in evals:
        ts_cfg = taskset.cfg
        tasks = (
            TasksetReader(
                taskset, batch_size=len(taskset), total_epochs=1, total_steps=None
            ).next_batch()
            or []
        )
        k = ts_cfg.repeat_times or (ts_cfg.rollout_args.n if ts_cfg.rollout_args else None) or 1
        experiences = run_workflows(tasks, engine, k, auxiliary_models=auxiliary_models)
        for key, value in eval_metrics(experiences, ts_cfg.name, k).items():
            metrics[prefix + key.removeprefix("eval")] = value
    return metrics
