"""``toolcall_reward``: function calling scored against the reference calls, with the Tool-N1
rules Trinity-RFT's ``ToolCallWorkflow`` uses (``trinity/common/workflows/
customized_toolcall_workflows.py``, after NVlabs/Tool-N1 ``compute_score_v0``).

Truth is the row's ``answer`` column: JSON of the reference calls, a list of
``{"name": ..., "arguments": {...}}``. The single part ``accuracy`` is 1.0 only when all hold:

- the response has exactly one ``<think>`` and one ``</think>``, and ``</think>`` comes before
  the first ``<tool_call>``;
- the last ``<tool_call>…</tool_call>`` holds JSON: a list of calls (a single object counts as a
  list of one; a JSON string holding JSON is read once more), each a dict with ``name`` and
  ``arguments``;
- the calls equal the reference as a multiset of ``(name, arguments)`` (argument order does not
  matter; call order does not matter); both empty also counts as equal.

Anything else is 0.0. A truth that is not JSON is a data error, not a zero reward.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from rft_core.errors import DataError
from rft_core.rewards.base import register

_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def parse_tool_calls(response: str) -> list[Any] | None:
    """The calls in the last ``<tool_call>`` block, or None when there is none or no JSON."""
    blocks = _TOOL_CALL_RE.findall(response)
    if not blocks:
        return None
    try:
        calls = json.loads(blocks[-1].strip())
        if isinstance(calls, str):
            calls = json.loads(calls)
    except json.JSONDecodeError:
        return None
    return [calls] if isinstance(calls, dict) else calls if isinstance(calls, list) else None


def _multiset(calls: list[dict[str, Any]]) -> Counter:
    return Counter((c["name"], json.dumps(c["arguments"], sort_keys=True)) for c in calls)


def _think_before_call(response: str) -> bool:
    if response.count("<think>") != 1 or response.count("</think>") != 1:
        return False
    call = response.find("<tool_call>")
    return call == -1 or response.find("</think>") < call


@register("toolcall_reward")
def toolcall_reward(response: str, truth: str | None) -> dict[str, float]:
    try:
        answer = json.loads(truth or "")
        if isinstance(answer, str):
            answer = json.loads(answer)
    except json.JSONDecodeError as err:
        raise DataError(f"toolcall_reward: the truth is not JSON tool calls: {err}") from None
    calls = parse_tool_calls(response)
    if calls is None or not _think_before_call(response):
        return {"accuracy": 0.0}
    if not all(isinstance(c, dict) and "name" in c and "arguments" in c for c in calls):
        return {"accuracy": 0.0}
    if not calls or not answer:
        return {"accuracy": float(len(calls) == len(answer))}
    try:
        return {"accuracy": float(_multiset(calls) == _multiset(answer))}
    except TypeError:  # arguments that are not JSON-serialisable
        return {"accuracy": 0.0}
