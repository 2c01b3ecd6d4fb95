"""``vllm.SamplingParams``: the keyword arguments and the checks of vLLM 0.26's
``SamplingParams`` (a ``msgspec.Struct``: an unknown keyword is a ``TypeError``), with vLLM
0.26's greedy check: ``n > 1`` at temperature 0 is a ``ValueError``."""

from enum import Enum
from typing import Any

_SAMPLING_EPS = 1e-5


class RequestOutputKind(Enum):
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


class SamplingParams:
    def __init__(
        self,
        *,
        n: int = 1,
        best_of: int | None = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repetition_penalty: float = 1.0,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        min_p: float = 0.0,
        seed: int | None = None,
        stop: str | list[str] | None = None,
        stop_token_ids: list[int] | None = None,
        ignore_eos: bool = False,
        max_tokens: int | None = 16,
        min_tokens: int = 0,
        logprobs: int | None = None,
        flat_logprobs: bool = False,
        prompt_logprobs: int | None = None,
        detokenize: bool = True,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
        logits_processors: Any = None,
        include_stop_str_in_output: bool = False,
        truncate_prompt_tokens: int | None = None,
        output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE,
        structured_outputs: Any = None,
        logit_bias: dict[int, float] | None = None,
        allowed_token_ids: list[int] | None = None,
        extra_args: dict[str, Any] | None = None,
        bad_words: list[str] | None = None,
    ) -> None:
        given = dict(locals())
        given.pop("self")
        self.__dict__.update(given)
        self._verify_args()
        if self.temperature < _SAMPLING_EPS:  # greedy: vLLM drops the filters
            self.top_p, self.top_k, self.min_p = 1.0, 0, 0.0
            self._verify_greedy_sampling()

    def _verify_greedy_sampling(self) -> None:
        if self.n > 1:
            raise ValueError(f"n must be 1 when using greedy sampling, got {self.n}.")

    def _verify_args(self) -> None:
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}.")
        if self.temperature < 0.0:
            raise ValueError(f"temperature must be non-negative, got {self.temperature}.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if not isinstance(self.top_k, int):
            raise TypeError(f"top_k must be an integer, got {type(self.top_k).__name__}")
        if self.top_k < -1:
            raise ValueError(f"top_k must be 0 (disable), or at least 1, got {self.top_k}.")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}.")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}.")
        if self.logprobs is not None and self.logprobs < 0:
            raise ValueError(f"logprobs must be non-negative, got {self.logprobs}.")
        if self.seed is not None and not isinstance(self.seed, int):
            raise TypeError(f"seed must be an int or None, got {self.seed!r}")

    def __repr__(self) -> str:
        return f"SamplingParams({self.__dict__})"
