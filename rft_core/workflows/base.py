"""The workflow contract: turn a batch of tasks into scored experiences with ONE batched engine
call per sampling setting (in practice one per taskset), never a loop over single prompts.

A subclass says how a task becomes a conversation (``messages``; or a raw ``prompt_text`` for
base models) and which reward function scores it by default (``default_reward_fn``);
:meth:`Workflow.run_batch` does the rest:

- sampling: the task's ``rollout_args`` (temperature, top_p, top_k, max_tokens, seed; the config
  layer already filled them from the ``model`` section) with ``n = repeat_times``;
- reward: ``task.reward_fn`` (a per-row override or the taskset's ``default_reward_fn_type``)
  or the workflow's default, called with ``task.reward_fn_args``; the parts it returns become
  ``Experience.metrics`` and their sum ``Experience.reward``;
- grouping: every response to one task shares ``group_id = "<taskset>:<index>"`` (``#2``,
  ``#3``... appended when the same task occurs again in the batch). Ids are unique within one
  call; the explorer prefixes its step number to make them unique across steps.

Subclasses are registered by name in ``WORKFLOWS`` (``@register("name")``), the registry
``default_workflow_type`` (or a row's ``format.workflow_key``) picks from.

Each subclass declares the ``workflow_args`` it takes (``takes_args``) and those Trinity-RFT's
workflow of that name takes but this one does not apply (``refused_args``: key -> why; an
error when set to anything but false/null, since ignoring it would change results). The config
check (``rft_core.config.registered``) reads both through ``workflow_args_table()``: a key in
neither is a warning naming its YAML path, a close misspelling of a taken key an error.
A class that does not set ``takes_args`` itself (a user's workflow, also one subclassing a
built-in: it may read more) is not checked.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, astuple, is_dataclass
from typing import Any, ClassVar

from rft_core import rewards
from rft_core.data.task import Task
from rft_core.errors import ConfigError
from rft_core.experience import Experience
from rft_core.registry import Registry
from rft_core.rollout.base import AuxiliaryModel, Generation, RolloutEngine, SamplingParams

_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "max_tokens", "seed")


def taskset_path(task: Task) -> str:
    """The YAML path of the taskset a task came from, for error messages."""
    return task.yaml_path


def sampling_params(task: Task, n: int) -> SamplingParams:
    """``SamplingParams`` from the task's ``rollout_args`` (unset keys keep the defaults)."""
    args = task.rollout_args
    if is_dataclass(args) and not isinstance(args, type):
        args = asdict(args)
    chosen = {k: args[k] for k in _SAMPLING_KEYS if args.get(k) is not None}
    return SamplingParams(n=n, **chosen)


class Workflow(ABC):
    """Base class of workflows; register subclasses with ``@workflows.register("name")``."""

    #: reward function used when the task names none (None: the task must name one)
    default_reward_fn: ClassVar[str | None] = None
    #: the ``workflow_args`` keys this workflow reads (None: undeclared, not checked)
    takes_args: ClassVar[tuple[str, ...] | None] = None
    #: keys Trinity's workflow of this name takes that this one does not apply: key -> why
    refused_args: ClassVar[dict[str, str]] = {}
    #: whether the task's reward function (default_reward_fn_type, reward_fn_args) is used
    uses_reward_fn: ClassVar[bool] = True

    def __init__(
        self,
        args: dict[str, Any] | None = None,
        *,
        auxiliary_models: Sequence[AuxiliaryModel] = (),
    ) -> None:
        self.args = dict(args or {})
        # explorer.auxiliary_models' engines, in config order (judges, reward models)
        self.auxiliary_models = list(auxiliary_models)

    @abstractmethod
    def messages(self, task: Task) -> list[dict[str, str]]:
        """The chat conversation sent to the model for ``task``."""

    def prompt_text(self, task: Task) -> str | None:
        """A raw prompt string sent without the chat template (base models), or None to send
        :meth:`messages` through the chat template (the default)."""
        return None

    def reward_fn_name(self, task: Task) -> str:
        name = task.reward_fn or self.default_reward_fn
        if not name:
            raise ConfigError(
                f"{taskset_path(task)}.default_reward_fn_type",
                f"{type(self).__name__} needs a reward function and task "
                f"{task.taskset}[{task.index}] names none; set default_reward_fn_type (or a "
                f"format.reward_fn_key column) to one of: {', '.join(rewards.names())}",
            )
        return name

    def check(self, task: Task) -> str:
        """Resolve and check the reward function of ``task`` before anything is generated."""
        name = self.reward_fn_name(task)
        path = f"{taskset_path(task)}.{task.reward_fn_from}"
        try:
            rewards.get(name, path=path)
        except ConfigError as err:
            raise ConfigError(
                err.path,
                f"{err.message} (task {task.taskset}[{task.index}])",
                value=err.value,
                allowed=err.allowed,
            ) from None
        rewards.check_args(name, task.reward_fn_args, path=f"{taskset_path(task)}.reward_fn_args")
        return name

    def score(
        self, task: Task, response: str, reward_fn: str, *, response_length: int | None = None
    ) -> dict[str, float]:
        """Reward parts of one response (``response_length``: its token count)."""
        return rewards.score(
            reward_fn, response, task.truth, task.reward_fn_args, response_length=response_length
        )

    def score_batch(
        self, tasks: list[Task], reward_fns: list[str], generations: list[list[Generation]]
    ) -> list[list[dict[str, float]]]:
        """Reward parts of every generation, per task; one :meth:`score` call each unless a
        workflow scores a whole batch at once (a judge model)."""
        return [
            [self.score(task, g.text, fn, response_length=len(g.response_ids)) for g in gens]
            for task, fn, gens in zip(tasks, reward_fns, generations, strict=True)
        ]

    def run_batch(
        self, tasks: list[Task], engine: RolloutEngine, repeat_times: int
    ) -> list[Experience]:
        """``repeat_times`` scored experiences per task, in task order."""
        if repeat_times < 1:
            raise ValueError(f"repeat_times must be >= 1, got {repeat_times}")
        reward_fns = [self.check(task) for task in tasks]
        start = time.perf_counter()
        generations = self._generate(tasks, engine, repeat_times)
        generated = time.perf_counter()
        scores = self.score_batch(tasks, reward_fns, generations)
        # the explorer's time/rollout and time/reward (a workflow without them: neither)
        self.timings = {"rollout": generated - start, "reward": time.perf_counter() - generated}
        group_ids = _group_ids(tasks)
        version = int(getattr(engine, "model_version", 0))
        experiences: list[Experience] = []
        for task, reward_fn, group_id, gens, task_scores in zip(
            tasks, reward_fns, group_ids, generations, scores, strict=True
        ):
            for gen, parts in zip(gens, task_scores, strict=True):
                reward = sum(parts.values())
                experiences.append(
                    experience_of(task, gen, group_id, reward, parts, version, reward_fn)
                )
        return experiences

    def _generate(self, tasks: list[Task], engine: RolloutEngine, n: int) -> list[list[Generation]]:
        """One ``engine.chat`` call per distinct sampling setting; results in task order."""
        by_params: dict[tuple, tuple[SamplingParams, list[int]]] = {}
        for i, task in enumerate(tasks):
            params = sampling_params(task, n)
            by_params.setdefault(astuple(params), (params, []))[1].append(i)
        results: list[list[Generation] | None] = [None] * len(tasks)
        for params, positions in by_params.values():
            texts = [self.prompt_text(tasks[i]) for i in positions]
            if all(text is not None for text in texts):
                outputs = engine.generate(texts, params)  # type: ignore[arg-type]
            elif any(tasks[i].reply_prefix for i in positions):
                ids = [
                    prefixed_prompt_ids(engine, self.messages(tasks[i]), tasks[i])
                    for i in positions
                ]
                outputs = engine.generate_ids(ids, params)
            else:
                outputs = engine.chat([self.messages(tasks[i]) for i in positions], params)
            if len(outputs) != len(positions) or any(len(g) != n for g in outputs):
                raise RuntimeError(
                    f"engine returned {[len(g) for g in outputs]} generations for "
                    f"{len(positions)} prompts × n={n}"
                )
            for i, gens in zip(positions, outputs, strict=True):
                results[i] = gens
        return results  # type: ignore[return-value]


def experience_of(
    task: Task,
    gen: Generation,
    group_id: str,
    reward: float,
    metrics: dict[str, float],
    version: int,
    reward_fn: str,
) -> Experience:
    """One scored generation of ``task`` as the experience the buffer carries."""
    return Experience(
        prompt_ids=list(gen.prompt_ids),
        response_ids=list(gen.response_ids),
        logprobs=list(gen.logprobs),
        reward=float(reward),
        group_id=group_id,
        metrics=metrics,
        model_version=version,
        prompt_text=task.prompt,
        response_text=gen.text,
        truncated=gen.finish_reason == "length",
        info={
            "taskset": task.taskset,
            "task_index": task.index,
            "reward_fn": reward_fn,
            "finish_reason": gen.finish_reason,
            "is_eval": task.is_eval,
        },
    )


def prefixed_prompt_ids(engine: RolloutEngine, conversation: list[dict], task: Task) -> list[int]:
    """The prompt of ``conversation`` (chat template, generation prompt on) followed by the
    task's ``reply_prefix``, as token ids: the model continues the reply from the prefix, as
    Trinity-RFT renders an assistant message holding the prefix with ``continue_final_message``."""
    text = engine.tokenizer.apply_chat_template(
        conversation,
        tokenize=False,
        add_generation_prompt=True,
        **getattr(engine, "chat_template_kwargs", {}),
    )
    text += task.reply_prefix or ""
    return engine.tokenizer(text, add_special_tokens=False)["input_ids"]


WORKFLOW_PATH = "buffer.explorer_input.taskset.default_workflow_type"

WORKFLOWS: Registry[type[Workflow]] = Registry("workflow", WORKFLOW_PATH)


def register(name: str) -> Callable[[type[Workflow]], type[Workflow]]:
    """Class decorator registering a Workflow subclass under ``name``."""
    return WORKFLOWS.register(name)


def get(name: str, *, path: str | None = None) -> type[Workflow]:
    """The workflow class registered as ``name``; unknown names raise a ConfigError listing the
    registered ones."""
    return WORKFLOWS.get(name, path=path)


def names() -> list[str]:
    return WORKFLOWS.names()


def workflow_args_table() -> dict[str, dict[str, Any] | None]:
    """Per registered workflow what its ``workflow_args`` may hold: ``{"takes": [...],
    "refuses": {key: why}, "default_reward_fn": name | None, "uses_reward_fn": bool}``, or
    None for a workflow that declares nothing (see the module doc)."""
    table: dict[str, dict[str, Any] | None] = {}
    for name in names():
        cls = WORKFLOWS.get(name)
        takes = cls.__dict__.get("takes_args")  # a subclass that declares nothing: unchecked
        if takes is None:
            table[name] = None
            continue
        table[name] = {
            "takes": sorted(takes),
            "refuses": dict(sorted(cls.refused_args.items())),
            "default_reward_fn": cls.default_reward_fn,
            "uses_reward_fn": cls.uses_reward_fn,
        }
    return table


def _group_ids(tasks: list[Task]) -> list[str]:
    seen: dict[str, int] = {}
    ids = []
    for task in tasks:
        base = f"{task.taskset}:{task.index}"
        seen[base] = seen.get(base, 0) + 1
        ids.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return ids
