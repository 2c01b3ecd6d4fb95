"""``vllm.logprobs`` (moved here from ``vllm.sequence`` in 0.10.2)."""

from dataclasses import dataclass


@dataclass
class Logprob:
    """The log-prob of one token, its vocab rank (>= 1) and its decoded text."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


PromptLogprobs = list[dict[int, Logprob] | None]
SampleLogprobs = list[dict[int, Logprob]]
