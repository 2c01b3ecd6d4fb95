"""Agentic workflows: agent code written against an OpenAI client acts on the rollout model
through the run's OpenAI-compatible endpoint (``rft_core.rollout.openai_server``), and the calls
it makes become the experiences.

A subclass of :class:`AgentWorkflow` writes one method, ``run_episode(task, client, model,
sampling)``: drive ``client`` (an ``openai.OpenAI``; ``model`` is the served model's name and
``sampling`` the task's ``rollout_args`` as OpenAI keyword arguments) however the agent likes,
and return the episode's reward parts. :meth:`AgentWorkflow.run_batch` starts the endpoint on
the engine the first time (it then lives until the explorer closes the engine), runs every
episode of the batch (``repeat_times`` per task) at the same time, each in a thread with a
client of its own session, so their calls reach the engine together and are sampled in one
batched call per turn.

Experiences follow Trinity-RFT's history semantics (``ModelWrapper.enable_history`` and
``extract_experience_from_history``, as its AgentScope workflows use them): **one experience
per model call** (per choice), holding that call's prompt ids, sampled ids and the engine's
log-probs, every one carrying the episode's reward (broadcast, as Trinity sets ``exp.reward`` on
each); ``info`` says where a call sits as the step-wise workflows write it: ``run_id`` (the
repeat: Trinity's ``eid.run``), ``step`` (the call's index in the episode: ``eid.step``),
``last_turn``, and ``steps`` (the episode's number of calls). All calls of all repeats of a task
share its ``group_id``; a step-wise advantage (``multi_step_grpo``) scores each episode by its
last call's reward and broadcasts it to the episode's calls, a plain one (``grpo``) treats each
call as a sample of the task. The explorer's rollout metrics read the last calls (one per
episode). An eval task keeps only its episodes' last calls, so eval metrics count episodes.

``react_math`` below is the agent of Trinity's AgentScope ReAct math examples, written as a plain
tool-calling loop; the workflows that need a service outside the job (web search, the e-mail
corpus) are refused at load by ``rft_core.config.registered``.
"""

from __future__ import annotations

import logging
import uuid
from abc import abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any

from rft_core.data.task import Task
from rft_core.experience import Experience
from rft_core.rollout.base import RolloutEngine
from rft_core.rollout.openai_server import endpoint_for
from rft_core.workflows.base import Workflow, _group_ids

log = logging.getLogger("rft_core.workflows.agent")

# rollout_args → chat-completions keyword arguments (top_k travels as vLLM's extension)
_OPENAI_KEYS = ("temperature", "top_p", "max_tokens", "seed")


@dataclass
class EpisodeResult:
    """What an agent's episode ends with: its reward parts (summed into the reward), the final
    answer (the experiences' ``response_text`` of the last call) and numbers for ``metrics``."""

    reward_parts: dict[str, float]
    answer: str = ""
    metrics: dict[str, float] = field(default_factory=dict)


def openai_sampling(task: Task, run: int) -> dict[str, Any]:
    """The task's ``rollout_args`` as ``chat.completions.create`` keyword arguments; a seed is
    offset by the repeat so the repeats of a task do not sample alike."""
    args = task.rollout_args
    if is_dataclass(args) and not isinstance(args, type):
        args = asdict(args)
    out = {k: args[k] for k in _OPENAI_KEYS if args.get(k) is not None}
    if out.get("seed") is not None:
        out["seed"] += run
    if args.get("top_k") not in (None, -1):
        out["extra_body"] = {"top_k": args["top_k"]}
    return out


class AgentWorkflow(Workflow):
    """Base of the workflows whose agent talks to the model through the OpenAI endpoint."""

    default_reward_fn = None

    def messages(self, task: Task) -> list[dict[str, str]]:  # the agent builds its own
        return [{"role": "user", "content": task.prompt}]

    def check(self, task: Task) -> str:
        return ""  # the episode scores itself

    @abstractmethod
    def run_episode(
        self, task: Task, client: Any, model: str, sampling: dict[str, Any]
    ) -> EpisodeResult:
        """Run the agent on ``task`` through ``client``; return the episode's reward."""

    def run_batch(
        self, tasks: list[Task], engine: RolloutEngine, repeat_times: int
    ) -> list[Experience]:
        if repeat_times < 1:
            raise ValueError(f"repeat_times must be >= 1, got {repeat_times}")
        reward_fns = [self.check(task) for task in tasks]  # before anything is generated
        endpoint = endpoint_for(engine)
        episodes = [
            (i, run, uuid.uuid4().hex) for i in range(len(tasks)) for run in range(repeat_times)
        ]

        clients = {session: endpoint.client(session) for _, _, session in episodes}

        def play(i: int, run: int, session: str) -> EpisodeResult:
            sampling = openai_sampling(tasks[i], run)
            return self.run_episode(tasks[i], clients[session], endpoint.model_name, sampling)

        with ThreadPoolExecutor(
            max_workers=max(1, len(episodes)), thread_name_prefix="agent"
        ) as pool:
            futures = [pool.submit(play, *episode) for episode in episodes]
            try:
                results = [f.result() for f in futures]
            finally:
                turns = {session: endpoint.take_turns(session) for _, _, session in episodes}
        group_ids = _group_ids(tasks)
        experiences: list[Experience] = []
        for (i, run, session), result in zip(episodes, results, strict=True):
            experiences.extend(
                self._experiences(
                    tasks[i], group_ids[i], run, turns[session], result, reward_fns[i]
                )
            )
        return experiences

    def _experiences(
        self,
        task: Task,
        group_id: str,
        run: int,
        turns: list[Any],
        result: EpisodeResult,
        reward_fn: str,
    ) -> list[Experience]:
        if not turns:
            log.warning(
                "task %s[%s] run %d: the agent made no model call", task.taskset, task.index, run
            )
            return []
        parts = {k: float(v) for k, v in result.reward_parts.items()}
        reward = float(sum(parts.values()))
        metrics = {**parts, **{k: float(v) for k, v in result.metrics.items()}}
        metrics["agent_calls"] = float(len(turns))
        kept = list(enumerate(turns))
        if task.is_eval:
            kept = kept[-1:]  # eval metrics count episodes
        out = []
        for step, turn in kept:
            last = step == len(turns) - 1
            out.append(
                Experience(
                    prompt_ids=list(turn.prompt_ids),
                    response_ids=list(turn.response_ids),
                    logprobs=list(turn.logprobs),
                    reward=reward,
                    group_id=group_id,
                    metrics=dict(metrics),
                    model_version=turn.model_version,
                    prompt_text=task.prompt,
                    response_text=turn.text,
                    truncated=turn.finish_reason == "length",
                    info={
                        "taskset": task.taskset,
                        "task_index": task.index,
                        "reward_fn": reward_fn or type(self).__name__,
                        "finish_reason": turn.finish_reason,
                        "is_eval": task.is_eval,
                        "run_id": str(run),
                        "step": step,
                        "steps": len(turns),
                        "last_turn": last,
                        **({"answer": result.answer, "messages": turn.messages} if last else {}),
                    },
                )
            )
        return out
