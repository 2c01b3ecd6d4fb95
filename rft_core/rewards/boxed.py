"""Rewards for answers written in ``\\boxed{}``: ``math_boxed_reward`` (Trinity-RFT's reward of
``math_boxed_workflow``) and ``math_dapo_reward`` (DAPO's, with its overlong-response penalty).

Both read the answer from the response's last ``\\boxed{…}`` and the truth the way
:func:`rft_core.rewards.math.extract_truth` does (GSM8K ``#### x``, a ``\\boxed{}``, or the
text). Equivalence is decided by ``math-verify`` (Hugging Face's LaTeX/sympy answer checker,
the library Trinity's own ``accuracy_reward`` uses) rather than by hand-written normalisation:
``\\frac{1}{10}`` = ``0.1``, ``72.0`` = ``72``, ``x+1`` = ``1+x``. Trinity compares boxed
answers by string normalisation (Hendrycks' ``strip_string``; verl's ``prime_math`` for DAPO),
so a few answers it marks wrong (``0.5`` for ``\\frac{1}{2}``) count as right here.
"""

from __future__ import annotations

import logging

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from rft_core.errors import ConfigError
from rft_core.rewards.base import register
from rft_core.rewards.math import extract_truth, last_boxed

log = logging.getLogger(__name__)

FORMAT_SCORE_COEF = 0.1
MAX_ANSWER_CHARS = 1000  # longer "answers" are not answers; sympy could take very long on them
_EXTRACTION = [LatexExtractionConfig(), ExprExtractionConfig()]


def _parsed(text: str) -> list:
    # the timeouts rely on SIGALRM, which only the main thread may use: off (inputs are capped)
    return parse(f"${text.replace('$', '').strip()}$", _EXTRACTION, parsing_timeout=None)


def answers_equal(answer: str, truth: str) -> bool:
    """``answer`` and ``truth`` (LaTeX or plain) denote the same value, by math-verify."""
    if not answer.strip() or not truth.strip() or len(answer) > MAX_ANSWER_CHARS:
        return False
    try:
        return bool(verify(_parsed(truth), _parsed(answer), timeout_seconds=None))
    except Exception as err:  # math-verify raises on inputs sympy cannot handle: not equal
        log.debug("math-verify failed on %r vs %r: %s", answer, truth, err)
        return False


def has_think_block(response: str) -> bool:
    """Exactly one ``<think>`` and one ``</think>``, in that order (Trinity's check)."""
    if response.count("<think>") != 1 or response.count("</think>") != 1:
        return False
    return response.find("<think>") < response.find("</think>")


@register("math_boxed_reward")
def math_boxed_reward(
    response: str,
    truth: str,
    *,
    with_think: bool = False,
    format_score_coef: float = FORMAT_SCORE_COEF,
) -> dict[str, float]:
    """``accuracy``: 1 when the last ``\\boxed{}`` equals the truth, else 0 (0 without a box).
    ``format_score``: 0, or ``-format_score_coef`` when ``with_think`` and the response lacks
    one ``<think>…</think>`` block."""
    answer = last_boxed(response)
    accuracy = 1.0 if answer is not None and answers_equal(answer, extract_truth(truth)) else 0.0
    format_score = 0.0
    if with_think and not has_think_block(response):
        format_score = -(format_score_coef or FORMAT_SCORE_COEF)
    return {"accuracy": accuracy, "format_score": format_score}


def overlong_penalty(
    response_length: int, max_response_length: int, cache_length: int, penalty_factor: float
) -> float:
    """DAPO's soft overlong punishment: 0 up to ``max - cache`` tokens, then falling linearly
    to ``-penalty_factor`` at ``max`` tokens, ``-penalty_factor`` beyond."""
    expected = max_response_length - cache_length
    if response_length < expected:
        return 0.0
    if response_length > max_response_length:
        return -penalty_factor
    return (expected - response_length) / cache_length * penalty_factor


@register("math_dapo_reward")
def math_dapo_reward(
    response: str,
    truth: str,
    *,
    enable_overlong_penalty: bool | None = None,
    penalty_factor: float | None = None,
    max_response_length: int | None = None,
    cache_length: int | None = None,
    response_length: int | None = None,
) -> dict[str, float]:
    """``accuracy``: the answer after the last ``</think>`` (its last ``\\boxed{}``, else all of
    it) equals the truth. ``format_score``: the overlong penalty when enabled, else 0.
    ``response_length`` (tokens) is filled in by the workflow."""
    text = response.split("</think>")[-1]
    boxed = last_boxed(text)
    answer = boxed if boxed is not None else text
    accuracy = 1.0 if answers_equal(answer, extract_truth(truth)) else 0.0
    format_score = 0.0
    if enable_overlong_penalty:
        if max_response_length is None or cache_length is None or penalty_factor is None:
            raise ConfigError(
                "reward_fn_args",
                "math_dapo_reward with enable_overlong_penalty needs max_response_length, "
                "cache_length and penalty_factor",
            )
        if max_response_length <= cache_length:
            raise ConfigError(
                "reward_fn_args.cache_length",
                f"must be < max_response_length ({max_response_length}), got {cache_length}",
                value=cache_length,
            )
        if response_length is None:
            raise RuntimeError("math_dapo_reward needs response_length from the workflow")
        format_score = overlong_penalty(
            response_length, max_response_length, cache_length, penalty_factor
        )
    return {"accuracy": accuracy, "format_score": format_score}
