"""The interface every rollout engine implements (``hf`` always, ``vllm`` where installed).

An engine turns prompts into sampled responses with the log-probs of the sampled tokens, and
accepts new weights from the synchronizer. One batched call per explorer step keeps CPU and GPU
busy; workflows never loop over single prompts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1 = off
    max_tokens: int = 64
    seed: int | None = None
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

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Replace the engine's weights (called by the synchronizer)."""
