"""``vllm.outputs.RequestOutput`` / ``CompletionOutput`` (the fields of vLLM 0.26)."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm.logprobs import PromptLogprobs, SampleLogprobs


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: Sequence[int]
    cumulative_logprob: float | None
    logprobs: SampleLogprobs | None
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    stop_reason: int | str | None = None
    lora_request: Any = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int] | None
    prompt_logprobs: PromptLogprobs | None
    outputs: list[CompletionOutput]
    finished: bool
    metrics: Any = None
    lora_request: Any = None
    encoder_prompt: str | None = None
    encoder_prompt_token_ids: list[int] | None = None
    num_cached_tokens: int | None = None
    kv_transfer_params: dict[str, Any] | None = field(default=None)
