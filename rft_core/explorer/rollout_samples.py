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
With several trainer ranks each rank records the marked experiences of its shard and hands them
back to the trainer (``rft_core.trainer.recorded_logprobs``), so each is sent once.

DPO (``train`` mode on offline pairs) has no explorer and no rollout engine, so no ``samples``
of the explorer's: the trainer keeps the first pairs of its steps by the same settings
(``mark_pairs``, whole pairs up to ``rollout_samples_per_step`` rows, trainer steps 1, 1+N, ...)
and sends them as rollout entries of its own (``pair_samples``), two a pair (``group`` = the
pair, ``side`` chosen/rejected), that the rollout explorer shows like the explorer's:
``reward`` is the side's implicit reward (β·(log π − log π_ref) of the response), the reward
parts the pair loss's terms of that pair alone (loss, both rewards, margin, accuracy),
``logprob_sum`` / ``reference_logprob_sum`` the response's log-prob under the policy and the
reference, and the tokens carry ``trainer_logprobs`` only (there is no sampling log-prob).

Only the kept rollouts are decoded token by token, so the cost is bounded by the setting, not by
the batch. This module imports no torch and nothing of Django.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from rft_core.data.task import Task
from rft_core.experience import Experience

LOGPROB_DECIMALS = 4
SAMPLE_INFO_KEY = "rollout_sample"  # Experience.info: the sample_index of a kept rollout
TRAINER_LOGPROBS_KEY = "trainer_logprobs"  # Experience.info: the trainer's, once computed
PAIR_INFO_KEY = "trainer_pair"  # Experience.info: a kept DPO pair's, once computed


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


def mark_pairs(experiences: list[Experience], limit: int) -> list[Experience]:
    """The step's batch with its first pairs marked for ``pair_samples`` (whole pairs, two rows
    each, up to ``limit`` rows rounded up to a pair): marked copies, so that the dataset's own
    experiences stay unmarked for the later epochs' steps."""
    pairs = (limit + 1) // 2 if limit > 0 else 0
    return [
        dataclasses.replace(exp, info={**exp.info, SAMPLE_INFO_KEY: i}) if i < pairs else exp
        for i, exp in enumerate(experiences)
    ]


def pair_samples(
    experiences: list[Experience],
    trainer_step: int,
    *,
    tokenizer: Any = None,
    token_logprobs: bool = True,
) -> list[dict[str, Any]]:
    """The rollout entries of the pairs ``mark_pairs`` marked and the trainer recorded
    (module docstring): chosen then rejected, pair by pair; ``tokenizer`` decodes the texts
    and the tokens (None, or ``token_logprobs`` False: no tokens)."""
    entries = []
    for exp in experiences:
        recorded = exp.info.pop(PAIR_INFO_KEY, None)
        if recorded is None or SAMPLE_INFO_KEY not in exp.info:
            continue
        pair = exp.info[SAMPLE_INFO_KEY]
        terms = {k: _number(v) for k, v in recorded["terms"].items()}
        for k, (side, ids) in enumerate(
            (("chosen", exp.response_ids), ("rejected", exp.rejected_ids))
        ):
            values = recorded[side]
            entry = {
                "prompt": _decoded(tokenizer, exp.prompt_ids),
                "response": _decoded(tokenizer, ids),
                "truth": None,
                "reward": terms.get(f"dpo_{side}_reward"),
                "reward_parts": terms,
                "group": pair,
                "advantage": None,
                "prompt_length": len(exp.prompt_ids),
                "response_length": len(ids),
                "truncated": False,
                "model_version": trainer_step - 1,  # the weights the step's forward ran
                "sample_index": 2 * pair + k,
                "side": side,
                "trainer_step": trainer_step,
                "logprob_sum": _number(sum(values)),
                "reference_logprob_sum": _number(recorded["reference_sums"][side]),
            }
            if token_logprobs and tokenizer is not None:
                entry["tokens"] = token_texts(tokenizer, ids)
                entry["trainer_logprobs"] = rounded_logprobs(values)
            entries.append(entry)
    return entries


def _decoded(tokenizer: Any, ids: list[int]) -> str:
    if tokenizer is None:
        return ""
    return tokenizer.decode(ids, skip_special_tokens=False)
