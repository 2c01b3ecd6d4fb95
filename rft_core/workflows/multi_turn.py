"""Multi-turn workflows: the model acts in an environment for several turns per task, the
environment scores the episode, and the whole episode becomes ONE experience whose response
holds the model's turns (trained, with the engine's log-probs) and the environment's turns
(masked out of the loss: ``action_mask`` 0, log-prob 0.0, ignored by the trainer).

This is Trinity-RFT's ``MultiTurnWorkflow`` contract (``process_messages_to_experience``: the
conversation → tokens, a generation mask over the assistant turns, the environment's reward).
A subclass says how a task becomes an :class:`Environment`; :meth:`MultiTurnWorkflow.run_batch`
runs every episode of the batch (``repeat_times`` per task) side by side, sending the next turn
of every live episode in ONE ``engine.chat`` call per turn (per sampling setting).

Token layout of an episode::

    prompt_ids   = prompt of turn 0 (system + first observation + generation prompt)
    response_ids = r0 | env1 | r1 | env2 | r2 ...
    action_mask  = 1s | 0s   | 1s | 0s   | 1s
    logprobs     = engine's | 0.0 | engine's | 0.0 | engine's

where ``rk`` are the tokens sampled at turn k and ``envk`` the tokens between them: the end of
the assistant turn as the chat template closes it and the environment's next message up to the
next generation prompt. Turn 0 goes through ``engine.chat``; every later turn is sampled from
the token ids above (``engine.generate_ids``: prompt_ids + r0 | env1 | ...), so the experience
is exactly the sequence the model saw, whatever the sampled tokens decode to. Where that is not
possible (an engine without ``generate_ids``, a template that rewrites earlier assistant turns)
the turn goes through ``engine.chat`` on the conversation; when the rendered prompts then do not
extend each other token for token, the experience is the final conversation rendered again
with its assistant turns trained and no engine log-probs (the trainer computes them), as
Trinity's ``convert_messages_to_experience`` does, and ``info["retokenized"]`` is True.

Step-wise (``step_wise``, set by the explorer for a turn-level advantage fn: algorithm_type
``multi_step_grpo`` or ``gigpo``, Trinity's step-wise workflows): each model turn is an experience
of its own, prompt = the context the turn was sampled from, response = its sampled tokens with the
engine's log-probs, reward = the episode's (Trinity's ``RewardPropagationWorkflow``), and
``info`` says where it sits: ``run_id`` (the episode within its group), ``step`` (the turn),
``last_turn``, ``env_state_hash`` (the environment's state before the turn,
``Environment.state_key``, GiGPO's anchor; absent when the environment has none).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import astuple, dataclass, field
from typing import Any

from rft_core.data.task import Task
from rft_core.errors import ConfigError
from rft_core.experience import Experience
from rft_core.messages import sft_experience
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

    def state_key(self) -> str | None:
        """The current state as a string, equal for equal states (GiGPO's anchor states);
        None: the environment has none to give."""
        return None


@dataclass
class Episode:
    env: Environment
    messages: list[dict[str, str]]
    params: SamplingParams
    turns: list[Generation] = field(default_factory=list)
    reward: float = 0.0
    done: bool = False
    states: list[str | None] = field(default_factory=list)  # before each turn


def pack_turns(
    turns: list[Generation],
) -> tuple[list[int], list[int], list[float], list[int]] | None:
    """``(prompt_ids, response_ids, logprobs, action_mask)`` of an episode whose turn k was
    sampled from ``turns[k].prompt_ids`` (the layout in the module doc); None when a turn's
    prompt does not start with the previous turn's prompt and sampled tokens."""
    prompt = list(turns[0].prompt_ids)
    response: list[int] = []
    logprobs: list[float] = []
    mask: list[int] = []
    for k, turn in enumerate(turns):
        if k:
            before = len(turns[k - 1].prompt_ids) + len(turns[k - 1].response_ids)
            if turn.prompt_ids[:before] != prompt + response:
                return None
            env_ids = list(turn.prompt_ids[before:])
            response += env_ids
            logprobs += [0.0] * len(env_ids)
            mask += [0] * len(env_ids)
        response += list(turn.response_ids)
        logprobs += list(turn.logprobs)
        mask += [1] * len(turn.response_ids)
    return prompt, response, logprobs, mask


def continuation_ids(
    tokenizer: Any, messages: list[dict[str, str]], last: Generation, template_kwargs: dict
) -> list[int] | None:
    """The tokens between the last turn's sampled tokens and the next generation prompt, for
    ``messages`` = [..., assistant (the last turn, ``last``), user (the environment)]: the rest
    of the assistant turn as the template closes it, the user message, the generation prompt.
    None when the template does not render the conversation as a growing prefix."""

    def render(conversation: list[dict[str, str]], generation_prompt: bool) -> str:
        return tokenizer.apply_chat_template(
            conversation,
            tokenize=False,
            add_generation_prompt=generation_prompt,
            **template_kwargs,
        )

    asked = render(messages[:-2], True)
    closed = render(messages[:-1], False)
    following = render(messages, True)
    content = messages[-2]["content"]
    if not (closed.startswith(asked + content) and following.startswith(closed)):
        return None
    tail = closed[len(asked) + len(content) :]
    if last.finish_reason == "stop" and last.response_ids:
        end = tokenizer.decode(last.response_ids[-1:])  # the sampled end token, e.g. <|im_end|>
        if tail.startswith(end):  # another end token (<|endoftext|>) stays, and so does the tail
            tail = tail[len(end) :]
    return tokenizer(tail + following[len(closed) :], add_special_tokens=False)["input_ids"]


class MultiTurnWorkflow(Workflow):
    """Base of environment workflows: subclasses implement :meth:`environment`. The reward is
    the environment's (no reward function); ``workflow_args.max_steps`` bounds the model turns
    of an episode (Trinity's default, 10)."""

    default_max_steps = 10
    takes_args = ("max_steps",)
    uses_reward_fn = False
    step_wise = False  # one experience per turn (module docstring); the explorer sets it

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
        for task in tasks:
            if task.reply_prefix:
                raise ConfigError(
                    f"{task.yaml_path}.format.reply_prefix",
                    f"{type(self).__name__} builds its own turns from the environment; a reply "
                    "prefix applies to single-turn workflows: remove it",
                    value=task.reply_prefix,
                )
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
            group_id = group_ids[i // repeat_times]
            if self.step_wise:
                run = str(i % repeat_times)
                experiences.extend(self._turn_experiences(task, episode, group_id, version, run))
                continue
            experiences.append(self._experience(task, episode, group_id, version, engine.tokenizer))
        return experiences

    def _next_turn(self, live: list[Episode], engine: RolloutEngine) -> None:
        """One model turn of every live episode: one engine call per sampling setting (and per
        way in: token ids where the episode's context is known, the conversation otherwise)."""
        by_call: dict[tuple, list[tuple[Episode, list[int] | None]]] = {}
        for episode in live:
            ids = self._context_ids(episode, engine)
            key = (astuple(episode.params), ids is None)
            by_call.setdefault(key, []).append((episode, ids))
        for calls in by_call.values():
            group = [episode for episode, _ in calls]
            params = group[0].params
            if calls[0][1] is None:
                outputs = engine.chat([e.messages for e in group], params)
            else:
                outputs = engine.generate_ids([ids for _, ids in calls], params)  # type: ignore[misc]
            if len(outputs) != len(group) or any(len(g) != 1 for g in outputs):
                raise RuntimeError(
                    f"engine returned {[len(g) for g in outputs]} generations for "
                    f"{len(group)} conversations × n=1"
                )
            for episode, (generation,) in zip(group, outputs, strict=True):
                episode.states.append(episode.env.state_key())
                episode.turns.append(generation)
                episode.messages.append({"role": "assistant", "content": generation.text})
                result = episode.env.step(generation.text)
                episode.reward = float(result.reward)
                episode.done = bool(result.done)
                if not episode.done and result.observation is not None:
                    episode.messages.append({"role": "user", "content": result.observation})
                episode.done = episode.done or result.observation is None

    @staticmethod
    def _context_ids(episode: Episode, engine: RolloutEngine) -> list[int] | None:
        """Turn k's prompt as token ids (turn k-1's prompt and sampled tokens, then the
        environment's), or None: turn 0, or the conversation must be rendered again."""
        if not episode.turns or not hasattr(engine, "generate_ids"):
            return None
        last = episode.turns[-1]
        kwargs = getattr(engine, "chat_template_kwargs", None) or {}
        env_ids = continuation_ids(engine.tokenizer, episode.messages, last, kwargs)
        if env_ids is None:
            return None
        return list(last.prompt_ids) + list(last.response_ids) + env_ids

    def _experience(
        self, task: Task, episode: Episode, group_id: str, version: int, tokenizer: Any
    ) -> Experience:
        packed = pack_turns(episode.turns)
        retokenized = packed is None
        if packed is None:  # the engine saw re-rendered conversations: the final one is trained
            packed = _rendered(tokenizer, episode.messages)
        prompt, response, logprobs, mask = packed
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
                "retokenized": retokenized,
                "messages": episode.messages,
            },
        )

    def _turn_experiences(
        self, task: Task, episode: Episode, group_id: str, version: int, run: str
    ) -> list[Experience]:
        """Step-wise: one experience per model turn (module docstring)."""
        metrics = episode.env.metrics()
        out = []
        last = len(episode.turns) - 1
        for k, turn in enumerate(episode.turns):
            info: dict[str, Any] = {
                "taskset": task.taskset,
                "task_index": task.index,
                "finish_reason": turn.finish_reason,
                "is_eval": task.is_eval,
                "run_id": run,
                "step": k,
                "last_turn": k == last,
                "turns": len(episode.turns),
            }
            if episode.states[k] is not None:
                info["env_state_hash"] = episode.states[k]
            out.append(
                Experience(
                    prompt_ids=list(turn.prompt_ids),
                    response_ids=list(turn.response_ids),
                    logprobs=list(turn.logprobs),
                    reward=episode.reward,
                    group_id=group_id,
                    metrics=dict(metrics),
                    model_version=version,
                    prompt_text=task.prompt,
                    response_text=turn.text,
                    truncated=turn.finish_reason == "length",
                    info=info,
                )
            )
        return out


def _rendered(
    tokenizer: Any, messages: list[dict[str, str]]
) -> tuple[list[int], list[int], list[float], list[int]]:
    """The final conversation rendered again, assistant turns trained (as Trinity's
    ``convert_messages_to_experience``); no log-probs: the trainer computes the old ones."""
    exp = sft_experience(tokenizer, messages, max_len=1 << 30)
    assert exp is not None  # an episode has at least one assistant turn
    return exp.prompt_ids, exp.response_ids, [], exp.action_mask
