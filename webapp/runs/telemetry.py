"""What a run reports, as rows: metric points, log lines and rollout samples from its monitor's
events, and the run's key figures (last and best eval accuracy) derived from them (a change is
pushed to the live pages with ``webapp.runs.live.publish_run``).

Called by the ingestor's projection (``webapp.ingest.projection``) for each event it stores
for the first time, inside that transaction, so a replayed stream adds nothing twice. Takes
``RunEvent`` rows (or anything with their attributes: ``kind``, ``role``, ``stage``, ``step``,
``payload``, ``emitted_at``, and ``seq`` when they have one).

Eval accuracy comes from the explorer's ``eval/<taskset>/accuracy/mean@<k>`` metrics
(``rft_core.workflows.metrics.eval_metrics``; the reward part ``accuracy`` of ``math_reward``).
With several eval tasksets an eval's figure is the mean over them.

The latest reward (``Run.latest_reward``, the runs table's reward column) is the value of the
newest ``rollout/reward/mean`` point (the explorer's mean reward of a step's rollouts), else
of the newest ``critic/rewards/mean`` (the trainer's), ``REWARD_METRICS`` in that order; it is
recomputed by the database (``latest_reward()``, two index range scans of
``metric_run_name_seq``) whenever a batch of points holds one of those names, so the table
reads a column instead of computing it per row and sorts on it.

A stage without a reward (SFT, DPO) has its own headline (``Run.headline``: the newest
``actor/sft_loss`` or ``actor/dpo_loss``, ``HEADLINE_LABELS``), kept beside the reward in
``headline_name``/``headline_value``; the newest of those and the reward metrics in a batch
says which one the run's current stage is judged by.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from django.db.models import F, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce, Greatest

from webapp.runs.live import publish_run
from webapp.runs.models import HEADLINE_LABELS, LogLine, MetricPoint, RolloutSample, Run

log = logging.getLogger(__name__)

EVAL_ACCURACY_RE = re.compile(r"^eval/(?P<taskset>.+)/accuracy/mean@(?P<k>\d+)$")
NAME_MAX = MetricPoint._meta.get_field("name").max_length
# the explorer's mean reward of a step's rollouts, then the trainer's (rft_core's names)
REWARD_METRICS = ("rollout/reward/mean", "critic/rewards/mean")


class EventLike(Protocol):
    kind: str
    role: str
    stage: str
    step: int | None
    payload: dict[str, Any]

    @property
    def emitted_at(self) -> Any: ...


def finite_or_none(value: Any) -> float | None:
    """A metric value as stored: NaN, inf, and anything not a number become null."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def eval_accuracy(metrics: dict[str, Any]) -> float | None:
    """The eval accuracy one metric event reports (mean over its eval tasksets), or None."""
    values = [
        v
        for name, raw in metrics.items()
        if EVAL_ACCURACY_RE.match(name) and (v := finite_or_none(raw)) is not None
    ]
    return sum(values) / len(values) if values else None


def record_metrics(run: Run, events: Iterable[EventLike]) -> list[MetricPoint]:
    """One MetricPoint per (event, metric name), in event order; updates the run's last/best
    eval accuracy. Returns the points written."""
    points: list[MetricPoint] = []
    last_accuracy: float | None = None
    best_accuracy: float | None = None
    for event in events:
        metrics = event.payload if isinstance(event.payload, dict) else {}
        wall_time = event.emitted_at.timestamp()
        for name, raw in metrics.items():
            if len(name) > NAME_MAX:
                log.warning(
                    "run %s: metric name longer than %d skipped: %.60s…", run.pk, NAME_MAX, name
                )
                continue
            points.append(
                MetricPoint(
                    run=run,
                    name=name,
                    role=event.role[:32],
                    stage=event.stage,
                    step=event.step,
                    wall_time=wall_time,
                    value=finite_or_none(raw),
                    seq=getattr(event, "seq", None),
                )
            )
        accuracy = eval_accuracy(metrics)
        if accuracy is not None:
            last_accuracy = accuracy
            best_accuracy = accuracy if best_accuracy is None else max(best_accuracy, accuracy)
    MetricPoint.objects.bulk_create(points)
    if last_accuracy is not None:
        _update_accuracy(run, last_accuracy, best_accuracy)
    if any(point.name in REWARD_METRICS for point in points):
        update_latest_reward(Run.objects.filter(pk=run.pk))
        run.refresh_from_db(fields=["latest_reward"])
    _update_headline(run, points)
    return points


def _update_headline(run: Run, points: list[MetricPoint]) -> None:
    """The run's headline after a batch of points: the newest of its reward metrics or of
    ``HEADLINE_LABELS``' (a stage without a reward) says which the stage's headline is."""
    newest = next(
        (p for p in reversed(points) if p.name in REWARD_METRICS or p.name in HEADLINE_LABELS),
        None,
    )
    if newest is None:
        return
    name = "" if newest.name in REWARD_METRICS else newest.name
    value = None if newest.name in REWARD_METRICS else newest.value
    if (run.headline_name, run.headline_value) != (name, value):
        Run.objects.filter(pk=run.pk).update(headline_name=name, headline_value=value)
        run.headline_name, run.headline_value = name, value
        publish_run(run)


def _newest(name: str) -> Subquery:
    newest = MetricPoint.objects.filter(run=OuterRef("pk"), name=name).order_by("-id")
    return Subquery(newest.values("value")[:1])


def latest_reward() -> Coalesce:
    """The latest reward of a run (an expression over ``Run`` rows): the newest point of the
    first of ``REWARD_METRICS`` that has a non-null newest value."""
    return Coalesce(*(_newest(name) for name in REWARD_METRICS))


def update_latest_reward(runs) -> int:
    """Recompute ``latest_reward`` of ``runs`` (a ``Run`` queryset) from their points, in one
    UPDATE; returns the number of runs."""
    return runs.update(latest_reward=latest_reward())


def _update_accuracy(run: Run, last: float, best: float) -> None:
    # one UPDATE computing the best in SQL: two ingestors never lose each other's maximum
    Run.objects.filter(pk=run.pk).update(
        last_eval_accuracy=Value(last),
        best_eval_accuracy=Greatest(Coalesce(F("best_eval_accuracy"), Value(best)), Value(best)),
    )
    run.refresh_from_db(fields=["last_eval_accuracy", "best_eval_accuracy"])
    publish_run(run)


def record_logs(run: Run, events: Iterable[EventLike]) -> list[LogLine]:
    """One LogLine per log event (actor = the emitting role). Returns the lines written."""
    lines = []
    for event in events:
        payload = event.payload if isinstance(event.payload, dict) else {}
        lines.append(
            LogLine(
                run=run,
                actor=event.role[:64],
                level=str(payload.get("level", ""))[:10],
                stage=event.stage,
                wall_time=event.emitted_at.timestamp(),
                text=str(payload.get("text", "")),
                seq=getattr(event, "seq", None),
            )
        )
    LogLine.objects.bulk_create(lines)
    return lines


# the fields a sample entry fills columns with; the rest (reward parts, taskset, ...) go to extra
SAMPLE_FIELDS = ("prompt", "response", "truth", "reward", "group", "advantage")
SAMPLE_FIELDS += ("response_length", "truncated", "tokens", "logprobs", "trainer_logprobs")
TOKEN_FIELDS = ("tokens", "logprobs", "trainer_logprobs")


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _token_view(entry: dict[str, Any]) -> dict[str, list]:
    """The token view's lists of an entry (tokens as text, log-probs finite or null); a list
    whose length is not the tokens' is dropped rather than shown against the wrong tokens."""
    tokens = entry.get("tokens")
    if not isinstance(tokens, list):
        return {}
    view: dict[str, list] = {"tokens": [_text(t) for t in tokens]}
    for key in TOKEN_FIELDS[1:]:
        values = entry.get(key)
        if isinstance(values, list) and len(values) == len(tokens):
            view[key] = [finite_or_none(v) for v in values]
    return view


def is_trainer_entry(entry: dict) -> bool:
    """A trainer's entry (log-probs of a kept rollout, ``rft_core.explorer.rollout_samples``), not a
    rollout of its own."""
    return "explorer_step" in entry and "trainer_logprobs" in entry and "prompt" not in entry


def _sample_entries(events: Iterable[EventLike], trainer: bool) -> Iterator[tuple[EventLike, dict]]:
    """(event, entry) for each mapping entry of the ``samples`` events: the trainer's entries
    (``trainer``) or the rollouts."""
    for event in events:
        payload = event.payload if isinstance(event.payload, dict) else {}
        entries = payload.get("samples")
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and is_trainer_entry(entry) == trainer:
                yield event, entry


def record_samples(run: Run, events: Iterable[EventLike]) -> list[RolloutSample]:
    """One RolloutSample per entry of each ``samples`` event (``{"samples": [{prompt,
    response, truth, reward, group, advantage, response_length, truncated, tokens, logprobs,
    ...}]}``, ``rft_core.explorer.rollout_samples``); other fields go to ``extra``. Entries that are not
    mappings are skipped. Returns the samples written."""
    samples = []
    # the trainer's entries hold log-probs of these rows: record_trainer_logprobs
    for event, entry in _sample_entries(events, trainer=False):
        samples.append(
            RolloutSample(
                run=run,
                stage=event.stage,
                step=event.step,
                seq=getattr(event, "seq", None) or 0,
                prompt=_text(entry.get("prompt")),
                response=_text(entry.get("response")),
                truth=_text(entry.get("truth")),
                reward=finite_or_none(entry.get("reward")),
                group=_count(entry.get("group")),
                advantage=finite_or_none(entry.get("advantage")),
                response_length=_count(entry.get("response_length")),
                truncated=entry.get("truncated") is True,
                tokens=_token_view(entry),
                extra={k: v for k, v in entry.items() if k not in SAMPLE_FIELDS},
            )
        )
    RolloutSample.objects.bulk_create(samples)
    return samples


def record_trainer_logprobs(run: Run, events: Iterable[EventLike]) -> int:
    """The trainer's ``samples`` entries (``rft_core.explorer.rollout_samples.trainer_samples``:
    ``{explorer_step, sample_index, trainer_step, trainer_logprobs}``) put beside the tokens of
    the RolloutSample they name (the run's row of that stage, explorer step and
    ``sample_index``) as ``tokens["trainer_logprobs"]``; a list whose length is not the tokens'
    is dropped (as ``_token_view`` does). An entry whose row is not stored (the explorer's
    event is sent before the buffer hands the rollouts to the trainer, so it comes first) is
    skipped. Returns the rows updated."""
    updated = 0
    for event, entry in _sample_entries(events, trainer=True):
        step, index = _count(entry.get("explorer_step")), _count(entry.get("sample_index"))
        values = entry.get("trainer_logprobs")
        if step is None or index is None or not isinstance(values, list):
            continue
        row = (
            RolloutSample.objects.filter(
                run=run, stage=event.stage, step=step, extra__sample_index=index
            )
            .order_by("-id")
            .first()
        )
        tokens = row.tokens.get("tokens") if row is not None else None
        if not isinstance(tokens, list) or len(tokens) != len(values):
            continue
        row.tokens = {**row.tokens, "trainer_logprobs": [finite_or_none(v) for v in values]}
        row.extra = {**row.extra, "trainer_step": _count(entry.get("trainer_step"))}
        row.save(update_fields=["tokens", "extra"])
        updated += 1
    return updated
