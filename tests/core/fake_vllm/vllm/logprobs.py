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


@dataclass
class FlatLogprobs:
    """vLLM's flat container (``SamplingParams(flat_logprobs=True)``): one list per field for all positions,
    position i's entries at ``[start_indices[i], end_indices[i])``; reads like a list of dicts."""

    start_indices: list = None  # type: ignore[assignment]
    end_indices: list = None  # type: ignore[assignment]
    token_ids: list = None  # type: ignore[assignment]
    logprobs: list = None  # type: ignore[assignment]
    ranks: list = None  # type: ignore[assignment]
    decoded_tokens: list = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        for name in (
            "start_indices",
            "end_indices",
            "token_ids",
            "logprobs",
            "ranks",
            "decoded_tokens",
        ):
            if getattr(self, name) is None:
                setattr(self, name, [])

    def append(self, position: dict) -> None:
        self.start_indices.append(len(self.logprobs))
        for token, lp in position.items():
            self.token_ids.append(token)
            self.logprobs.append(lp.logprob)
            self.ranks.append(lp.rank)
            self.decoded_tokens.append(lp.decoded_token)
        self.end_indices.append(len(self.logprobs))

    def __len__(self) -> int:
        return len(self.start_indices)

    def __getitem__(self, i: int) -> dict:
        lo, hi = self.start_indices[i], self.end_indices[i]
        return {
            self.token_ids[k]: Logprob(self.logprobs[k], self.ranks[k], self.decoded_tokens[k])
            for k in range(lo, hi)
        }

    def __iter__(self):
        return (self[i] for i in range(len(self)))
