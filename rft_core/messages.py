"""SFT and DPO data → Experiences, through the tokenizer's chat template.

SFT rows hold ``messages`` (a chat; also accepted: the bare list, or ``prompt``/``response``
strings). The trainable tokens are exactly the assistant turns as the template renders them
(their content and the end-of-turn token); system and user turns are masked. ``prompt_ids``
is everything before the first assistant turn; later user turns sit in ``response_ids`` with
``action_mask`` 0.

DPO rows hold ``chosen`` and ``rejected`` (strings or assistant message lists) after a
``prompt`` (string) or ``messages`` (the chat so far); ``response_ids`` is the chosen response
and ``rejected_ids`` the rejected one.
"""

from __future__ import annotations

import logging
from typing import Any

from rft_core.errors import DataError
from rft_core.experience import Experience

log = logging.getLogger(__name__)


def _render_ids(tokenizer: Any, messages: list[dict], *, generation_prompt: bool) -> list[int]:
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=generation_prompt
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _as_messages(row: Any, index: int) -> list[dict]:
    if isinstance(row, list):
        return row
    if isinstance(row, dict):
        if "messages" in row:
            return list(row["messages"])
        if "prompt" in row and "response" in row:
            return [
                {"role": "user", "content": row["prompt"]},
                {"role": "assistant", "content": row["response"]},
            ]
    keys = sorted(row) if isinstance(row, dict) else type(row).__name__
    raise DataError(
        f"SFT row {index}: expected a 'messages' list (or 'prompt' and 'response'), got {keys}; "
        "set the taskset's format keys or convert the file to messages rows"
    )


def sft_experience(tokenizer: Any, messages: list[dict], max_len: int) -> Experience | None:
    """One SFT Experience; None when no assistant turn fits ``max_len``."""
    ids = _render_ids(tokenizer, messages, generation_prompt=False)
    trainable = [0] * len(ids)
    first_start = None
    for k, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        start = len(_render_ids(tokenizer, messages[:k], generation_prompt=True)) if k else 0
        end = len(_render_ids(tokenizer, messages[: k + 1], generation_prompt=False))
        for t in range(start, min(end, len(ids))):
            trainable[t] = 1
        first_start = start if first_start is None else first_start
    if first_start is None:
        return None
    ids, trainable = ids[:max_len], trainable[:max_len]
    if first_start >= len(ids) or not any(trainable[first_start:]):
        return None
    return Experience(
        prompt_ids=ids[:first_start],
        response_ids=ids[first_start:],
        action_mask=trainable[first_start:],
        truncated=len(ids) < len(_render_ids(tokenizer, messages, generation_prompt=False)),
    )


def _response_messages(value: Any) -> list[dict]:
    if isinstance(value, str):
        return [{"role": "assistant", "content": value}]
    if isinstance(value, dict):
        return [value]
    return list(value)


def dpo_experience(tokenizer: Any, row: dict, index: int, max_len: int) -> Experience | None:
    if "messages" in row:
        prompt = list(row["messages"])
    elif "prompt" in row:
        prompt = row["prompt"]
        prompt = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    else:
        raise DataError(
            f"DPO row {index}: needs 'prompt' or 'messages' beside 'chosen'/'rejected', got "
            f"{sorted(row)}"
        )
    prompt_ids = _render_ids(tokenizer, prompt, generation_prompt=True)

    def response(key: str) -> list[int]:
        full = _render_ids(
            tokenizer, prompt + _response_messages(row[key]), generation_prompt=False
        )
        return full[len(prompt_ids) : max_len]

    chosen, rejected = response("chosen"), response("rejected")
    if len(prompt_ids) >= max_len or not chosen or not rejected:
        return None
    return Experience(prompt_ids=prompt_ids, response_ids=chosen, rejected_ids=rejected)


def experiences_from_messages(rows: list[Any], tokenizer: Any, max_len: int) -> list[Experience]:
    """SFT rows (messages) or DPO rows (chosen/rejected) → Experiences; see the module doc.
    Rows with nothing trainable within ``max_len`` tokens are skipped (and counted in the log)."""
    out: list[Experience] = []
    skipped = 0
    for index, row in enumerate(rows):
        if isinstance(row, dict) and "chosen" in row and "rejected" in row:
            experience = dpo_experience(tokenizer, row, index, max_len)
        else:
            experience = sft_experience(tokenizer, _as_messages(row, index), max_len)
        if experience is None:
            skipped += 1
        else:
            out.append(experience)
    if skipped:
        log.warning(
            "skipped %d of %d rows with nothing to train within %d tokens",
            skipped,
            len(rows),
            max_len,
        )
    if rows and not out:
        raise DataError(
            f"none of the {len(rows)} training rows has an assistant turn within max_len="
            f"{max_len} tokens; raise model.max_model_len or check the messages format"
        )
    return out
