"""The rollout explorer's queries: a run's kept rollout steps, and one page of rollouts of a step
(or of every step) sorted and searched, each with its token view, with the reward mean and spread
of each task group shown (the page shows step -> task group -> rollout).

``RolloutQuery.parse`` reads the request's parameters and answers a bad one with a message that
names it (the view turns it into a 400):

    stage   the stage's name ("" for a run without stages; default: the newest step's)
    step    an explorer step, or ``all`` (default: the newest kept step)
    sort    group (task groups in order, the default) | -reward | reward | -advantage |
            advantage | -response_length | response_length  ("-": highest first; nulls last)
    q       text searched in the prompt, the response and the truth (case-insensitive)
    page    from 1; ``PAGE_SIZE`` rollouts a page
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django.db.models import Avg, Count, F, Max, Min, Q, QuerySet, StdDev, Window

from webapp.runs.models import RolloutSample, Run

PAGE_SIZE = 20
SORTS = {
    "group": ("group", "id"),
    "-reward": (F("reward").desc(nulls_last=True), "id"),
    "reward": (F("reward").asc(nulls_last=True), "id"),
    "-advantage": (F("advantage").desc(nulls_last=True), "id"),
    "advantage": (F("advantage").asc(nulls_last=True), "id"),
    "-response_length": (F("response_length").desc(nulls_last=True), "id"),
    "response_length": (F("response_length").asc(nulls_last=True), "id"),
}
Q_MAX = 200


class BadQuery(ValueError):
    """A parameter the explorer cannot read; the message names it."""


def rollout_steps(run: Run) -> list[dict[str, Any]]:
    """Every kept step of ``run`` in stream order: stage, step, rollouts, mean reward."""
    rows = (
        RolloutSample.objects.filter(run=run)
        .values("stage", "step")
        .annotate(first=Min("id"), samples=Count("id"), reward_mean=Avg("reward"))
        .order_by("first")
    )
    return [
        {
            "stage": r["stage"],
            "step": r["step"],
            "samples": r["samples"],
            "reward_mean": r["reward_mean"],
        }
        for r in rows
    ]


@dataclass
class RolloutQuery:
    stage: str | None = None
    step: int | None = None  # None with all_steps False: the newest kept step
    all_steps: bool = False
    sort: str = "group"
    q: str = ""
    page: int = 1

    @classmethod
    def parse(cls, params: Any) -> RolloutQuery:
        query = cls(stage=params.get("stage"), q=(params.get("q") or "").strip())
        step = params.get("step") or ""
        if step == "all":
            query.all_steps = True
        elif step:
            try:
                query.step = int(step)
            except ValueError:
                raise BadQuery(f"step: must be an explorer step or 'all', got {step!r}") from None
        sort = params.get("sort") or "group"
        if sort not in SORTS:
            raise BadQuery(f"sort: must be one of {', '.join(SORTS)}, got {sort!r}")
        query.sort = sort
        page = params.get("page") or "1"
        try:
            query.page = int(page)
            if query.page < 1:
                raise ValueError
        except ValueError:
            raise BadQuery(f"page: must be a page number (an integer >= 1), got {page!r}") from None
        if len(query.q) > Q_MAX:
            raise BadQuery(f"q: the search text is {len(query.q)} characters, at most {Q_MAX}")
        return query

    def rows(self, run: Run, steps: list[dict[str, Any]]) -> QuerySet[RolloutSample]:
        """The rollouts asked for, in the sort's order; by task group over every step, the
        newest step first (as the picker lists them), then its groups in order."""
        rows = RolloutSample.objects.filter(run=run)
        if not self.all_steps:
            if self.step is None and steps:  # the newest kept step
                self.stage, self.step = steps[-1]["stage"], steps[-1]["step"]
            if self.stage is None:
                stages = [s["stage"] for s in steps if s["step"] == self.step]
                self.stage = stages[-1] if stages else ""
            rows = rows.filter(stage=self.stage, step=self.step)
        elif self.stage is not None:
            rows = rows.filter(stage=self.stage)
        if self.q:
            text = self.q
            rows = rows.filter(
                Q(prompt__icontains=text) | Q(response__icontains=text) | Q(truth__icontains=text)
            )
        if self.all_steps and self.sort == "group":
            # a step's place in the stream: its first rollout's id (stage names repeat steps)
            first = Window(Min("id"), partition_by=[F("stage"), F("step")])
            return rows.annotate(step_first=first).order_by("-step_first", *SORTS["group"])
        return rows.order_by(*SORTS[self.sort])


def rollout_item(sample: RolloutSample) -> dict[str, Any]:
    item = dict(sample.extra or {})
    item.update(
        {
            "id": sample.id,
            "stage": sample.stage,
            "step": sample.step,
            "group": sample.group,
            "prompt": sample.prompt,
            "response": sample.response,
            "truth": sample.truth,
            "reward": sample.reward,
            "advantage": sample.advantage,
            "response_length": sample.response_length,
            "truncated": sample.truncated,
            "tokens": sample.tokens or {},
        }
    )
    return item


def group_summaries(run: Run, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each task group that ``items`` show rollouts of, over all its kept rollouts (not only
    those on the page or matching a search): samples, reward mean, spread (the population
    standard deviation, what GRPO divides advantages by), lowest and highest reward."""
    keys = {(i["stage"], i["step"], i["group"]) for i in items}
    if not keys:
        return []
    where = Q()
    for stage, step, group in keys:
        where |= Q(stage=stage, step=step, group=group)
    rows = (
        RolloutSample.objects.filter(where, run=run)
        .values("stage", "step", "group")
        .annotate(
            samples=Count("id"),
            reward_mean=Avg("reward"),
            reward_std=StdDev("reward"),
            reward_min=Min("reward"),
            reward_max=Max("reward"),
        )
        .order_by()
    )
    return sorted(rows, key=lambda r: (r["stage"], r["step"], r["group"]))


def rollout_page(run: Run, query: RolloutQuery) -> dict[str, Any]:
    """The ``rollouts.json`` body: the kept steps (for the picker), one page of rollouts and
    the summaries of their task groups."""
    steps = rollout_steps(run)
    rows = query.rows(run, steps)
    total = rows.count()
    pages = max(1, math.ceil(total / PAGE_SIZE))
    start = (query.page - 1) * PAGE_SIZE
    items = [rollout_item(s) for s in rows[start : start + PAGE_SIZE]]
    return {
        "steps": steps,
        "stage": query.stage,
        "step": "all" if query.all_steps else query.step,
        "sort": query.sort,
        "sorts": list(SORTS),
        "q": query.q,
        "page": query.page,
        "pages": pages,
        "total": total,
        "items": items,
        "groups": group_summaries(run, items),
    }
