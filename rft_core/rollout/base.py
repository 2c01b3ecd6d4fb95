"""The interface every rollout engine implements (``hf`` always, ``vllm`` where installed), and
what engines share: the sampling parameters, the ``Generation`` an engine returns, and
``PromptEncoding`` (prompt strings and chat conversations to token ids, prompt truncation).

An engine turns prompts into sampled responses with the log-probs of the sampled tokens, and
accepts new weights from the synchronizer. One batched call per explorer step keeps CPU and GPU
busy; workflows never loop over single prompts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

log = logging.getLogger(__name__)


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1 = off
    max_tokens: int = 64
    seed: int | None = None
    ignore_eos: bool = False  # sample max_tokens whatever comes (vLLM's name; benchmarks)
    # Greedy decoding when temperature == 0.


@dataclass
class Generation:
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]  # log-prob of each sampled response token (same length as response_ids)
    text: str
    finish_reason: str  # "stop" (EOS) or "length"
    extra: dict[str, Any] = field(default_factory=dict)


class RolloutEngine(Protocol):
    tokenizer: Any
    model_version: int

    def generate(self, prompts: list[str], params: SamplingParams) -> list[list[Generation]]:
        """Sample ``params.n`` responses for each already-rendered prompt string."""

    def chat(
        self, conversations: list[list[dict]], params: SamplingParams
    ) -> list[list[Generation]]:
        """Render each conversation with the chat template (generation prompt on) and sample."""

    def generate_ids(
        self, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Generation]]:
        """Sample for each already-tokenized prompt (a multi-turn episode's exact context)."""

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Replace the engine's weights (called by the synchronizer)."""


@dataclass
class AuxiliaryModel:
    """An ``explorer.auxiliary_models`` entry's engine, with the sampling its entry sets
    (temperature, top_p, top_k, max_response_tokens); the trainer never updates it."""

    engine: RolloutEngine
    sampling: SamplingParams
    model_path: str


class PromptEncoding:
    """Prompt strings and chat conversations → token ids → ``generate_ids``; shared by engines.
    Needs ``tokenizer``, ``chat_template_kwargs`` and ``generate_ids`` on the engine."""

    tokenizer: Any
    chat_template_kwargs: dict[str, Any]
    max_prompt_tokens: int | None = None

    def fit_prompts(self, prompt_ids: list[list[int]]) -> list[list[int]]:
        """Prompts longer than ``max_prompt_tokens`` keep their last ``max_prompt_tokens``
        tokens (the end holds the question and the generation prompt), as vLLM's
        ``truncate_prompt_tokens`` does, with a warning."""
        limit = self.max_prompt_tokens
        if not limit or all(len(p) <= limit for p in prompt_ids):
            return prompt_ids
        longer = [len(p) for p in prompt_ids if len(p) > limit]
        log.warning(
            "%d prompt(s) of up to %d tokens truncated to model.max_prompt_tokens=%d (kept the end)",
            len(longer),
            max(longer),
            limit,
        )
        return [p[-limit:] if len(p) > limit else p for p in prompt_ids]

    def generate_ids(
        self, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Generation]]:
        raise NotImplementedError

    def generate(self, prompts: list[str], params: SamplingParams) -> list[list[Generation]]:
        """Sample ``params.n`` responses for each already-rendered prompt string."""
        ids = [self.tokenizer(p)["input_ids"] for p in prompts]
        return self.generate_ids(ids, params)

    def chat(
        self, conversations: list[list[dict]], params: SamplingParams
    ) -> list[list[Generation]]:
        """Render each conversation with the chat template (generation prompt on) and sample."""
        return self.generate_ids([self.encode_chat(c) for c in conversations], params)

    def encode_chat(self, conversation: list[dict]) -> list[int]:
        """Token ids of a conversation rendered with the chat template, generation prompt on."""
        text = self.tokenizer.apply_chat_template(
            conversation, tokenize=False, add_generation_prompt=True, **self.chat_template_kwargs
        )
        # the template already holds any BOS it wants: no second one from the tokenizer
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]
