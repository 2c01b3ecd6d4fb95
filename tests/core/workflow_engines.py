"""The engines the workflow tests run (``workflows/``): ``ScriptedEngine``, a tiny RolloutEngine
that answers from a script, the tasks it answers, and the demo model as an auxiliary judge on
the real ``hf`` engine."""

from __future__ import annotations

from pathlib import Path

from rft_core.data.task import Task
from rft_core.rollout.base import AuxiliaryModel, Generation, SamplingParams


class ScriptedEngine:
    """Replies to a conversation by the content of its last (user) turn."""

    def __init__(self, replies: dict[str, list[str]], model_version: int = 3) -> None:
        self.replies = replies
        self.model_version = model_version
        self.tokenizer = None
        self.calls: list[tuple[list[list[dict]], SamplingParams]] = []

    def chat(self, conversations: list[list[dict]], params: SamplingParams):
        self.calls.append((conversations, params))
        out = []
        for conv in conversations:
            texts = self.replies[conv[-1]["content"]][: params.n]
            out.append(
                [
                    Generation(
                        prompt_ids=[1, 2, 3],
                        response_ids=list(range(len(t))),
                        logprobs=[-0.5] * len(t),
                        text=t,
                        finish_reason="length" if len(t) >= params.max_tokens else "stop",
                    )
                    for t in texts
                ]
            )
        return out

    def generate(self, prompts, params):
        raise AssertionError("workflows must use chat")

    def load_weights(self, state_dict, version):
        raise AssertionError("not used")


def task(index: int, prompt: str, truth: str | None, **kw) -> Task:
    kw.setdefault("rollout_args", {"temperature": 0.7, "max_tokens": 40, "n": 99, "top_p": None})
    return Task(index=index, taskset="gsm", raw={}, prompt=prompt, truth=truth, **kw)


def demo_judge(directory: Path, max_prompt_tokens: int) -> AuxiliaryModel:
    """The untrained demo model saved in ``directory``, as a greedy judge of 8 tokens."""
    from rft_core.demo import build_model, build_tokenizer
    from rft_core.rollout import build_engine

    tokenizer = build_tokenizer()
    build_model(tokenizer, seed=0).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    engine = build_engine("hf", str(directory), seed=0, max_prompt_tokens=max_prompt_tokens)
    return AuxiliaryModel(engine, SamplingParams(temperature=0.0, max_tokens=8), str(directory))
