"""``countdown_reward``: the Countdown game (reach a target with each given number used once),
with Trinity-RFT's (TinyZero's) scoring.

Truth is JSON ``{"target": 24, "numbers": [4, 6, 1, 3]}``. The equation is the last
``<answer>…</answer>`` on the response's last line. The single part ``score`` is:

- ``0.0`` when there is no such answer;
- ``0.1`` (the format score) when the answer is there but does not use exactly the given
  numbers, does not evaluate (bad characters, division by zero) or misses the target;
- ``1.0`` when it uses each number once and evaluates to the target (within 1e-5).

Trinity evaluates the equation with ``eval`` behind a character filter; here the same filtered
text goes to the exact-fraction expression parser of :mod:`rft_core.rewards.math`, so no model
text is ever executed (``**`` is therefore not accepted; Trinity's filter lets it through).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from rft_core.errors import RFTError
from rft_core.rewards.base import register
from rft_core.rewards.math import parse_number

COUNTDOWN_FORMAT_SCORE = 0.1
COUNTDOWN_SCORE = 1.0

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>")
_EQUATION_CHARS_RE = re.compile(r"^[\d+\-*/().\s]+$")


def countdown_truth(truth: str) -> tuple[float, list[int]]:
    """``(target, numbers)`` from the JSON truth; a malformed truth is a taskset error."""
    try:
        data = json.loads(truth)
        return float(data["target"]), [int(n) for n in data["numbers"]]
    except (ValueError, TypeError, KeyError) as err:
        raise RFTError(
            f"countdown_reward needs the truth as JSON "
            f'{{"target": <int>, "numbers": [<int>, ...]}}, got {truth!r} ({err})'
        ) from None


def extract_equation(response: str) -> str | None:
    """The last ``<answer>…</answer>`` on the last line of ``response`` (stripped), or None."""
    matches = _ANSWER_RE.findall(response.split("\n")[-1])
    return matches[-1].strip() if matches else None


def uses_numbers(equation: str, numbers: Sequence[int]) -> bool:
    """Each of ``numbers`` appears exactly once and no other number does."""
    return sorted(int(n) for n in re.findall(r"\d+", equation)) == sorted(numbers)


def evaluate_equation(equation: str) -> float | None:
    """The value of an arithmetic equation of digits, ``+ - * / ( ) .``; None when it has other
    characters or does not evaluate."""
    if not _EQUATION_CHARS_RE.match(equation):
        return None
    value = parse_number(equation)
    return None if value is None else float(value)


@register("countdown_reward")
def countdown_reward(response: str, truth: str) -> dict[str, float]:
    """``score``: 1.0 right equation, 0.1 an answer that is wrong, 0.0 no answer."""
    target, numbers = countdown_truth(truth)
    equation = extract_equation(response)
    if equation is None:
        return {"score": 0.0}
    if not uses_numbers(equation, numbers):
        return {"score": COUNTDOWN_FORMAT_SCORE}
    value = evaluate_equation(equation)
    if value is None or abs(value - target) >= 1e-5:
        return {"score": COUNTDOWN_FORMAT_SCORE}
    return {"score": COUNTDOWN_SCORE}
