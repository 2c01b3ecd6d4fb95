"""Multi-turn workflows: the model acts in an environment for several turns per task, the
environment scores the episode, and the whole episode becomes ONE experience whose response
holds the model's turns (trained, with the engine's log-probs) and the environment's turns
(masked out of the loss: ``action_mask`` 0, log-prob 0.0, ignored by the trainer).

This is Trinity-RFT's ``MultiTurnWorkflow`` contract (``process_messages_to_experience``: the
conversation → tokens, a generation mask over the assistant turns, the environment's reward).
A subclass says how a task becomes an :class:`Environment`; :meth:`MultiTurnWorkflow.run_batch`
runs every episode of the batch (``repeat_times`` per task) side by side, sending the next turn
of every live episode in ONE ``engine.chat`` call per turn (per sampling setting).

Token layout of an episode (turn k's prompt is the whole conversation so far, rendered by the
engine with the chat template)::

    prompt_ids   = prompt of turn 0 (system + first observation + generation prompt)
    response_ids = r0 | env1 | r1 | env2 | r2 ...
    action_mask  = 1s | 0s   | 1s | 0s   | 1s
    logprobs     = engine's | 0.0 | engine's | 0.0 | engine's

where ``rk`` are the tokens sampled at turn k and ``envk`` are the tokens turn k's prompt adds
after ``prompt0 + r0 | ... | r(k-1)``: the end of the assistant turn as the template closes it
and the environment's next message up to the next generation prompt. When the rendered prompt
of turn k does not start with the tokens sampled before (a template that rewrites assistant
turns, a sampled end token the template spells differently), ``envk`` is what follows the
longest common prefix; the experience counts such turns in ``info["retokenized_turns"]``.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import astuple, dataclass, field
from typing import Any

from rft_core.data.task import Task
from rft_core.experience import Experience
from rft_core.rollout.base import Generation, RolloutEngine, SamplingParams
from rft_core.workflows.base import Workflow, _group_ids, sampling_params


@dataclass
class StepResult:
    """What the environment answers to one model turn."""

    observation: str | None  # the next user message (None when the episode is over)
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


class Environment:
    """One episode of an environment. ``first_messages`` opens the conversation (system prompt
    and first observation), ``step`` answers each model turn, ``metrics`` sums the episode up
    (numbers only; they become ``Experience.metrics``)."""

    @abstractmethod
    def first_messages(self) -> list[dict[str, str]]: ...

    @abstractmethod
    def step(self, response: str) -> StepResult: ...

    def metrics(self) -> dict[str, float]:
        return {}


@dataclass
class Episode:
    env: Environment
    messages: list[dict[str, str]]
    params: SamplingParams
    turns: list[Generation] = field(default_factory=list)
    reward: float = 0.0
    done: bool = False


def pack_turns(turns: list[Generation]) -> tuple[list[int], list[int], list[float], list[int], int]:
    """``(prompt_ids, response_ids, logprobs, action_mask, retokenized_turns)`` of an episode
    whose turn k was sampled from ``turns[k].prompt_ids`` (the layout in the module doc)."""
    prompt = list(turns[0].prompt_ids)
    response: list[int] = []
    logprobs: list[float] = []
    mask: list[int] = []
    retokenized = 0
    for k, turn in enumerate(turns):
        if k:
            context = prompt + response
            rendered = turn.prompt_ids
            common = _common_prefix(context, rendered)
            if common < len(context):
                retokenized += 1
            env_ids = list(rendered[max(common, len(prompt)) :])
            response += env_ids
            logprobs += [0.0] * len(env_ids)
            mask += [0] * len(env_ids)
        response += list(turn.response_ids)
        logprobs += list(turn.logprobs)
        mask += [1] * len(turn.response_ids)
    return prompt, response, logprobs, mask, retokenized


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class MultiTurnWorkflow(Workflow):
    """Base of environment workflows: subclasses implement :meth:`environment`. The reward is
    the environment's (no reward function); ``workflow_args.max_steps`` bounds the model turns
    of an episode (Trinity's default, 10)."""

    default_max_steps = 10

    @abstractmethod
    def environment(self, task: Task, run: int) -> Environment:
        """A fresh episode of ``task``'s environment for its ``run``-th repeat."""

    def messages(self, task: Task) -> list[dict[str, str]]:
        return self.environment(task, 0).first_messages()

    def check(self, task: Task) -> str:
        return ""  # the environment scores the episode

    @property
    def max_steps(self) -> int:
        return int(self.args.get("max_steps", self.default_max_steps))

    def run_batch(
        self, tasks: list[Task], engine: RolloutEngine, repeat_times: int
    ) -> list[Experience]:
        if repeat_times < 1:
            raise ValueError(f"repeat_times must be >= 1, got {repeat_times}")
        episodes = []
        for task in tasks:
            for run in range(repeat_times):
                env = self.environment(task, run)
                params = sampling_params(task, 1)
                if params.seed is not None:  # the repeats of a task must not sample alike
                    params.seed += run
                episodes.append(Episode(env, env.first_messages(), params))
        for _ in range(self.max_steps):
            live = [e for e in episodes if not e.done]
            if not live:
                break
            self._next_turn(live, engine)
        version = int(getattr(engine, "model_version", 0))
        experiences = []
        group_ids = _group_ids(tasks)
        for i, episode in enumerate(episodes):
            task = tasks[i // repeat_times]
            experiences.append(
                self._experience(task, episode, group_ids[i // repeat_times], version)
            )
        return experiences

    def _next_turn(self, live: list[Episode], engine: RolloutEngine) -> None:
        """One model turn of every live episode: one engine call per sampling setting."""
        by_params: dict[tuple, list[Episode]] = {}
        for episode in live:
            by_params.setdefault(astuple(episode.params), []).append(episode)
        for group in by_params.values():
            outputs = engine.chat([e.messages for e in group], group[0].params)
            if len(outputs) != len(group) or any(len(g) != 1 for g in outputs):
                raise RuntimeError(
                    f"engine returned {[len(g) for g in outputs]} generations for "
                    f"{len(group)} conversations × n=1"
                )
            for episode, (generation,) in zip(group, outputs, strict=True):
                episode.turns.append(generation)
                episode.messages.append({"role": "assistant", "content": generation.text})
                result = episode.env.step(generation.text)
                episode.reward = float(result.reward)
                episode.done = bool(result.done)
                if not episode.done and result.observation is not None:
                    episode.messages.append({"role": "user", "content": result.observation})
                episode.done = episode.done or result.observation is None

    def _experience(self, task: Task, episode: Episode, group_id: str, version: int) -> Experience:
        prompt, response, logprobs, mask, retokenized = pack_turns(episode.turns)
        metrics = episode.env.metrics()
        last = episode.turns[-1]
        return Experience(
            prompt_ids=prompt,
            response_ids=response,
            logprobs=logprobs,
            action_mask=mask,
            reward=episode.reward,
            group_id=group_id,
            metrics=metrics,
            model_version=version,
            prompt_text=task.prompt,
            response_text="\n".join(t.text for t in episode.turns),
            truncated=last.finish_reason == "length",
            info={
                "taskset": task.taskset,
                "task_index": task.index,
                "finish_reason": last.finish_reason,
                "is_eval": task.is_eval,
                "turns": len(episode.turns),
                "retokenized_turns": retokenized,
                "messages": episode.messages,
            },
        )
