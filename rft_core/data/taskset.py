"""A taskset: the rows of a dataset resolved against the taskset's ``format`` into Tasks.

    taskset = load_taskset(cfg.buffer.explorer_input.taskset)
    len(taskset); taskset[0]  # -> Task(prompt=..., truth=..., workflow="math_workflow", ...)

Rows are read once (``rft_core.data.source``) and turned into a Task on access. Missing
``prompt_key`` / ``response_key`` columns are reported at load time with the columns present.
``read_explorer_tasksets`` reads all of an explorer's tasksets at once (``ExplorerTasksets``):
the launcher's preflight does, and hands them to the explorer actor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rft_core.config.schema import ExplorerInput, TasksetConfig
from rft_core.data.source import DatasetConfig, Rows, missing_dataset, read_config_rows
from rft_core.data.task import Task
from rft_core.errors import DataError, RFTError

DEFAULT_WORKFLOW = "math_workflow"


def config_path(cfg: DatasetConfig, fallback: str) -> str:
    """The YAML path of a taskset/buffer config (set by the validator), for error messages."""
    return getattr(cfg, "_yaml_path", None) or fallback


class Taskset:
    """The tasks of one taskset config; ``taskset[i]`` is the Task of row ``i``."""

    def __init__(
        self,
        cfg: TasksetConfig,
        rows: Rows,
        *,
        is_eval: bool = False,
        default_workflow: str | None = None,
        default_reward_fn: str | None = None,
    ):
        self.cfg = cfg
        self.rows = rows
        self.is_eval = is_eval
        self.name = cfg.name
        self.workflow = cfg.default_workflow_type or default_workflow or DEFAULT_WORKFLOW
        self.reward_fn = cfg.default_reward_fn_type or default_reward_fn
        self.rollout_args = {
            k: v
            for k, v in vars(cfg.rollout_args).items()
            if v is not None and not k.startswith("_")
        }
        self._check_columns()

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> Task:
        if not 0 <= index < len(self):
            raise IndexError(f"taskset {self.name!r} has {len(self)} tasks; no index {index}")
        fmt = self.cfg.format
        row = self.rows.row(index)
        prompt = row.get(fmt.prompt_key)
        if prompt is None:
            raise DataError(
                f"{self._where('format.prompt_key')}: row {index} of {self.rows.describe()} has no "
                f"{fmt.prompt_key!r} value; fix the row or remove it"
            )
        truth = row.get(fmt.response_key) if fmt.response_key else None
        if fmt.response_key and truth is None:
            raise DataError(
                f"{self._where('format.response_key')}: row {index} of {self.rows.describe()} "
                f"has no {fmt.response_key!r} value (the reward needs the truth); fix the row "
                "or remove it"
            )
        system_prompt = fmt.system_prompt
        if fmt.system_prompt_key and row.get(fmt.system_prompt_key):
            system_prompt = str(row[fmt.system_prompt_key])
        workflow, workflow_from = self.workflow, "default_workflow_type"
        if fmt.workflow_key and row.get(fmt.workflow_key):
            workflow = str(row[fmt.workflow_key])
            workflow_from = f"format.workflow_key (column {fmt.workflow_key!r} of row {index})"
        reward_fn, reward_fn_from = self.reward_fn, "default_reward_fn_type"
        if fmt.reward_fn_key and row.get(fmt.reward_fn_key):
            reward_fn = str(row[fmt.reward_fn_key])
            reward_fn_from = f"format.reward_fn_key (column {fmt.reward_fn_key!r} of row {index})"
        return Task(
            index=index,
            taskset=self.name,
            raw=row,
            prompt=str(prompt),
            truth=None if truth is None else str(truth),
            system_prompt=system_prompt,
            reply_prefix=fmt.reply_prefix or None,
            workflow=workflow,
            reward_fn=reward_fn,
            rollout_args=dict(self.rollout_args),
            workflow_args=dict(self.cfg.workflow_args),
            reward_fn_args=dict(self.cfg.reward_fn_args),
            is_eval=self.is_eval,
            yaml_path=config_path(self.cfg, "buffer.explorer_input.taskset"),
            workflow_from=workflow_from,
            reward_fn_from=reward_fn_from,
        )

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def _where(self, key: str) -> str:
        return f"{config_path(self.cfg, 'taskset ' + repr(self.name))}.{key}"

    def _check_columns(self) -> None:
        fmt, columns = self.cfg.format, self.rows.columns
        required = [("format.prompt_key", fmt.prompt_key)]
        if fmt.response_key:
            required.append(("format.response_key", fmt.response_key))
        for key, column in required:
            if column not in columns:
                raise DataError(
                    f"{self._where(key)}: column {column!r} is not in {self.rows.describe()}; "
                    f"columns present: {', '.join(columns)}. Set {key} to one of them"
                )


class TasksetChain:
    """Several training tasksets read one after another (``explorer_input.tasksets``): index
    ``i`` of the chain is a task of the first taskset, then of the second, ...; an epoch covers
    them all. Reading settings (shuffle, start index) come from the first taskset."""

    def __init__(self, tasksets: list[Taskset]):
        self.tasksets = tasksets
        self.cfg = tasksets[0].cfg
        self.name = "+".join(t.name for t in tasksets)
        self.is_eval = False

    def __len__(self) -> int:
        return sum(len(t) for t in self.tasksets)

    def __getitem__(self, index: int) -> Task:
        if index < 0:
            raise IndexError(f"tasksets {self.name!r}: no index {index}")
        for taskset in self.tasksets:
            if index < len(taskset):
                return taskset[index]
            index -= len(taskset)
        raise IndexError(f"tasksets {self.name!r} have {len(self)} tasks")

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def chain_tasksets(tasksets: list[Taskset]) -> Taskset | TasksetChain:
    """The explorer's training tasks: one taskset, or several chained in order."""
    return tasksets[0] if len(tasksets) == 1 else TasksetChain(tasksets)


def load_training_tasksets(ts_cfgs: list[TasksetConfig]) -> Taskset | TasksetChain:
    """Read the training tasksets ``ts_cfgs`` and chain them (:func:`chain_tasksets`)."""
    return chain_tasksets([load_taskset(c, is_eval=False) for c in ts_cfgs])


@dataclass
class ExplorerTasksets:
    """Every taskset one explorer reads, each read once: the training ones in config order
    (``taskset`` or ``tasksets``) and one per ``eval_tasksets`` entry."""

    training: list[Taskset] = field(default_factory=list)
    evals: list[Taskset] = field(default_factory=list)

    def training_tasks(self) -> Taskset | TasksetChain:
        return chain_tasksets(self.training)


def read_explorer_tasksets(
    explorer_input: ExplorerInput,
    problems: list[str] | None = None,
    missing: list[str] | None = None,
) -> ExplorerTasksets:
    """Read every training and eval taskset of ``explorer_input``. With ``problems``, each
    taskset's error (its message names the YAML path) is added there and the rest are still
    read; without, the first error is raised. With ``missing`` (``--dry-run``), a taskset whose
    dataset is not on this machine is not read: a note naming it goes there instead."""
    out = ExplorerTasksets()
    checks = [(ts, False) for ts in explorer_input.all_tasksets]
    checks += [(ts, True) for ts in explorer_input.eval_tasksets]
    for ts_cfg, is_eval in checks:
        absent = missing_dataset(ts_cfg) if missing is not None else None
        if absent is not None:
            where = config_path(ts_cfg, f"taskset {ts_cfg.name!r}")
            missing.append(f"{where}.path: {absent}")  # type: ignore[union-attr]
            continue
        try:
            taskset = load_taskset(ts_cfg, is_eval=is_eval)
        except RFTError as err:
            if problems is None:
                raise
            problems.append(str(err))
            continue
        (out.evals if is_eval else out.training).append(taskset)
    return out


def load_taskset(
    ts_cfg: TasksetConfig,
    *,
    is_eval: bool = False,
    default_workflow: str | None = None,
    default_reward_fn: str | None = None,
) -> Taskset:
    """Read the taskset's rows (local dir, file or offline cache) and check its format keys."""
    where = config_path(ts_cfg, f"taskset {ts_cfg.name!r}")
    if ts_cfg.storage_type != "file":
        raise DataError(
            f"{where}.storage_type: tasksets are read from files here; {ts_cfg.storage_type!r} is not supported for tasksets"
        )
    rows = read_config_rows(ts_cfg, where, "taskset")
    return Taskset(
        ts_cfg,
        rows,
        is_eval=is_eval,
        default_workflow=default_workflow,
        default_reward_fn=default_reward_fn,
    )
