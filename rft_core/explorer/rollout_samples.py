"""Which rollouts of an explorer step are kept for the rollout explorer, and what each carries.

``monitor.rollout_samples_interval`` picks the kept steps (1, 1+N, 1+2N, ...) and
``monitor.rollout_samples_per_step`` how many rollouts of each: whole task groups in task
order, so that a group's rewards and advantages are seen side by side (a group larger than what
is left is cut at the limit; deterministic, the first groups of the step). Each kept rollout
becomes one entry of the monitor's ``samples`` event:

    prompt, response, truth, reward, reward_parts ({accuracy, format_score, ...}),
    taskset, task_index, group (the task group within the step, from 0), advantage (None when
    the trainer computes it, or the group was filtered out), prompt_length, response_length,
    truncated (the response hit max tokens), model_version,
    tokens + logprobs (with ``monitor.rollout_token_logprobs``: each response token as text and
    its log-prob under the policy that sampled it, rounded to 4 decimals)

    sample_index (the entry's place in the step's list)

With the tokens, each kept experience is marked (``info[SAMPLE_INFO_KEY]`` = its
``sample_index``): the trainer that trains it records the log-prob its own forward gives each
response token in its step (``trainer_logprobs``, the same weights' view of the same tokens:
the train/inference mismatch) and sends ``trainer_samples`` entries
``{explorer_step, sample_index, trainer_step, trainer_logprobs}`` that the dashboard puts
beside the entry's tokens. Only the marked experiences are recorded, so the cost stays bounded.

Only the kept rollouts are decoded token by token, so the cost is bounded by the setting, not by
the batch. This module imports no torch and nothing of Django.
"""

from __future__ import annotations

import math
from typing import Any

from rft_core.data.task import Task
from rft_core.experience import Experience

LOGPROB_DECIMALS = 4
SAMPLE_INFO_KEY = "rollout_sample"  # Experience.info: the sample_index of a kept rollout
TRAINER_LOGPROBS_KEY = "trainer_logprobs"  # Experience.info: the trainer's, once computed


def keeps_step(step: int, interval: int) -> bool:
    """Whether explorer ``step`` (from 1) keeps its rollouts: steps 1, 1+N, 1+2N, ..."""
    return interval >= 1 and (step - 1) % interval == 0


def _number(value: Any) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def kept_groups(experiences: list[Experience], limit: int) -> list[tuple[int, Experience]]:
    """The first ``limit`` experiences of whole task groups in task order, each with the index
    of its group within the step."""
    order: dict[str, int] = {}
    kept = []
    for exp in experiences:
        group = order.setdefault(exp.group_id, len(order))
        if len(kept) >= limit:
            break
        kept.append((group, exp))
    return kept


def token_texts(tokenizer: Any, ids: list[int]) -> list[str]:
    """Each token id decoded on its own (what the token view shows; a byte-level token that is
    part of a multi-byte character decodes to the replacement character)."""
    if tokenizer is None or not ids:
        return []
    return list(tokenizer.batch_decode([[int(i)] for i in ids], skip_special_tokens=False))


def rollout_samples(
    tasks: list[Task],
    experiences: list[Experience],
    limit: int,
    *,
    tokenizer: Any = None,
    token_logprobs: bool = True,
) -> list[dict[str, Any]]:
    """The monitor's ``samples`` entries for the first ``limit`` experiences (module docstring);
    ``tokenizer`` decodes the tokens of the token view (None, or ``token_logprobs`` False:
    no tokens)."""
    truths = {(t.taskset, t.index): t.truth for t in tasks}
    samples = []
    for index, (group, exp) in enumerate(kept_groups(experiences, limit)):
        key = (exp.info.get("taskset"), exp.info.get("task_index"))
        sample = {
            "prompt": exp.prompt_text,
            "response": exp.response_text,
            "truth": truths.get(key),
            "reward": _number(exp.reward),
            "reward_parts": {k: _number(v) for k, v in (exp.metrics or {}).items()},
            "taskset": key[0],
            "task_index": key[1],
            "group": group,
            "advantage": _number(exp.advantage),
            "prompt_length": len(exp.prompt_ids),
            "response_length": len(exp.response_ids),
            "truncated": bool(exp.truncated),
            "model_version": exp.model_version,
            "sample_index": index,
        }
        if token_logprobs and tokenizer is not None:
            sample["tokens"] = token_texts(tokenizer, exp.response_ids)
            sample["logprobs"] = rounded_logprobs(exp.logprobs)
            exp.info[SAMPLE_INFO_KEY] = index
        samples.append(sample)
    return samples


def rounded_logprobs(values: list[float]) -> list[float | None]:
    """Log-probs as the samples carry them: finite ones rounded to ``LOGPROB_DECIMALS``."""
    return [None if (v := _number(lp)) is None else round(v, LOGPROB_DECIMALS) for lp in values]


def trainer_samples(experiences: list[Experience], trainer_step: int) -> list[dict[str, Any]]:
    """The trainer's entries for the marked experiences of its step that it recorded
    log-probs for (taken out of their ``info``): ``{explorer_step, sample_index,
    trainer_step, trainer_logprobs}``."""
    entries = []
    for exp in experiences:
        values = exp.info.pop(TRAINER_LOGPROBS_KEY, None)
        if values is None or SAMPLE_INFO_KEY not in exp.info:
            continue
        entries.append(
            {
                "explorer_step": exp.explorer_step,
                "sample_index": exp.info[SAMPLE_INFO_KEY],
                "trainer_step": trainer_step,
                "trainer_logprobs": rounded_logprobs(values),
            }
        )
    return entries
