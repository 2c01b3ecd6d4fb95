"""``vllm.inputs.TokensPrompt``: a TypedDict, so unknown keys are only caught by ``LLM``."""

from typing import Any, NotRequired, TypedDict


class TokensPrompt(TypedDict):
    prompt_token_ids: list[int]
    token_type_ids: NotRequired[list[int]]
    multi_modal_data: NotRequired[Any]
    mm_processor_kwargs: NotRequired[dict[str, Any]]
    cache_salt: NotRequired[str]


TOKENS_PROMPT_KEYS = frozenset(TokensPrompt.__annotations__)
