"""``rlcr_reward``: RLCR (reinforcement learning with calibration rewards) for math answers that
end with a verbalized confidence, as Trinity-RFT's ``trinity/common/rewards/rlcr_reward.py``
(``RLCRRewardFn``) scores them. Semantics reproduced, code written here.

A response must END with the chain ``<think>…</think> <answer>…</answer> <analysis>…</analysis>
<confidence>q</confidence>`` (only whitespace between and after the eight tags; none of the
four tag names open, close, nest or cross anywhere else out of order) with ``q`` a finite number
in [0, 1]. Five parts, each multiplied by its weight (``weights``; default below):

- ``format``: 1 when the chain is well formed, else 0;
- ``accuracy``: 1 when the chain is well formed and the answer equals the truth (the
  equivalence of ``math_reward``: numbers compare by value), else 0;
- ``brier``: ``1 - (accuracy - q)^2`` when the chain is well formed, else 0 (a Brier score
  turned into a reward: confident and right 1, confident and wrong 0, q = 0.5 gives 0.75);
- ``mean_confidence``: the last well-formed ``<confidence>`` value anywhere in the response (0
  when there is none): logged, weighted 1e-5 so it barely touches the reward;
- ``confidence_one_or_zero``: 1 when that value is < 0.01 or > 0.99 (an uncalibrated extreme),
  weighted 1e-5 too.

Default weights (Trinity's): format 0.5, accuracy 0.5, brier 0.5, mean_confidence 1e-5,
confidence_one_or_zero 1e-5. ``reward_fn_args.weights`` replaces them: all five keys, numbers.
Trinity verifies answers with ``math_verify`` under a timeout; here with ``math_reward``'s own
checker (no dependency, nothing executed).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from rft_core.errors import RFTError
from rft_core.rewards.base import register
from rft_core.rewards.math import is_correct

COMPONENTS = ("format", "accuracy", "brier", "mean_confidence", "confidence_one_or_zero")
DEFAULT_WEIGHTS = {
    "format": 0.5,
    "accuracy": 0.5,
    "brier": 0.5,
    "mean_confidence": 1e-5,
    "confidence_one_or_zero": 1e-5,
}
_CHAIN = ("think", "answer", "analysis", "confidence")
_TAG_RE = re.compile(r"<(/?)(think|answer|analysis|confidence)>")


def parse_confidence(payload: str) -> float | None:
    """A confidence in [0, 1] from a tag's text; None when empty, not a number, or outside."""
    try:
        value = float(payload.strip())
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) and 0.0 <= value <= 1.0 else None


def last_confidence(response: str) -> float | None:
    """The last closed ``<confidence>`` value, when every confidence tag of ``response`` is
    balanced and unnested (the rest of the chain may be malformed); else None."""
    opened: re.Match[str] | None = None
    payload: str | None = None
    for tag in _TAG_RE.finditer(response):
        if tag.group(2) != "confidence":
            continue
        if not tag.group(1):
            if opened is not None:
                return None
            opened = tag
        else:
            if opened is None:
                return None
            payload, opened = response[opened.end() : tag.start()], None
    if opened is not None or payload is None:
        return None
    return parse_confidence(payload)


def parse_chain(response: str) -> tuple[str, float] | None:
    """(answer, confidence) when ``response`` ends with the well-formed chain; else None."""
    tags = list(_TAG_RE.finditer(response))
    open_name: str | None = None
    for tag in tags:  # no tag of the four nests, crosses or closes unopened
        closing, name = bool(tag.group(1)), tag.group(2)
        if closing:
            if open_name != name:
                return None
            open_name = None
        elif open_name is not None:
            return None
        else:
            open_name = name
    if open_name is not None or len(tags) < 2 * len(_CHAIN):
        return None
    last = tags[-2 * len(_CHAIN) :]
    expected = [(close, name) for name in _CHAIN for close in ("", "/")]
    if [(t.group(1), t.group(2)) for t in last] != expected:
        return None
    for close_at in (1, 3, 5):  # only whitespace between a closing tag and the next opening
        if response[last[close_at].end() : last[close_at + 1].start()].strip():
            return None
    if response[last[-1].end() :].strip():
        return None
    confidence = parse_confidence(response[last[6].end() : last[7].start()])
    if confidence is None:
        return None
    return response[last[2].end() : last[3].start()], confidence


def _weights(weights: Mapping[str, Any] | None) -> dict[str, float]:
    if weights is None:
        return dict(DEFAULT_WEIGHTS)
    if not isinstance(weights, Mapping) or set(weights) != set(COMPONENTS):
        raise RFTError(
            f"reward_fn_args.weights of rlcr_reward must give exactly {', '.join(COMPONENTS)}; "
            f"got {weights!r}"
        )
    out = {}
    for name in COMPONENTS:
        value = weights[name]
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise RFTError(f"reward_fn_args.weights.{name}: a finite number, got {value!r}")
        out[name] = float(value)
    return out


@register("rlcr_reward")
def rlcr_reward(
    response: str, truth: str, *, weights: Mapping[str, Any] | None = None
) -> dict[str, float]:
    """The five weighted RLCR parts of ``response`` (see the module doc)."""
    w = _weights(weights)
    safe = last_confidence(response)
    chain = parse_chain(response)
    accuracy = brier = 0.0
    if chain is not None:
        answer, confidence = chain
        accuracy = float(bool(truth) and is_correct(f"<answer>{answer}</answer>", truth))
        brier = 1.0 - (accuracy - confidence) ** 2
    return {
        "format": w["format"] * float(chain is not None),
        "accuracy": w["accuracy"] * accuracy,
        "brier": w["brier"] * brier,
        "mean_confidence": w["mean_confidence"] * (safe if safe is not None else 0.0),
        "confidence_one_or_zero": w["confidence_one_or_zero"]
        * float(safe is not None and (safe < 0.01 or safe > 0.99)),
    }
