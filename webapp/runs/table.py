"""``/runs/``: the table of every run the user may see, across their experiments (staff: all).

One row per run: status, stage, step, the latest reward, the eval accuracy (last and best),
duration, tags, owner. Filters ``?status=``, ``?tag=``, ``?experiment=<id>``, a search ``?q=``
(experiment name or project, the run's notes, a tag, ``#<number>``), a sort ``?sort=<key>`` (a
leading ``-`` reverses it) and ``?page=``; all of it is done by the database, a page of
PAGE_SIZE rows at a time, so the page costs the same at 10 runs and at 10,000. A filter value
the page does not know answers 400 naming the parameter.

The latest reward is read for the rows shown only: one index range scan per run and name
(``metric_run_name_seq``, newest first) of ``REWARD_METRICS``, the explorer's mean reward first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.db.models import DurationField, Exists, ExpressionWrapper, F, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce, Now
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.experiments.models import Experiment, Tag
from webapp.runs.models import MetricPoint, Run, RunStatus

PAGE_SIZE = 50
# the explorer's mean reward of a step's rollouts, then the trainer's (rft_core's names)
REWARD_METRICS = ("rollout/reward/mean", "critic/rewards/mean")
SORTS = {
    "created": ("id",),
    "experiment": ("experiment__name", "number"),
    "status": ("status", "id"),
    "step": ("step", "id"),
    "reward": ("latest_reward", "id"),
    "eval": ("last_eval_accuracy", "id"),
    "best_eval": ("best_eval_accuracy", "id"),
    "duration": ("duration", "id"),
}
DEFAULT_SORT = "-created"
NULLABLE = {"step", "latest_reward", "last_eval_accuracy", "best_eval_accuracy"}
COLUMNS = (  # (label, sort key or "")
    ("Run", "experiment"), ("Status", "status"), ("Stage", ""), ("Step", "step"),
    ("Reward", "reward"), ("Eval acc.", "eval"), ("Best eval", "best_eval"),
    ("Duration", "duration"), ("Tags", ""), ("Owner", ""), ("Created", "created"),
)  # fmt: skip


class BadFilter(ValueError):
    """A query parameter the table does not know: ``param`` and what is wrong with it."""

    def __init__(self, param: str, message: str):
        super().__init__(f"?{param}=: {message}")
        self.param = param


@dataclass
class TableQuery:
    status: str = ""
    tag: str = ""
    experiment: int | None = None
    q: str = ""
    sort: str = DEFAULT_SORT
    page: str = "1"
    params: dict[str, str] = field(default_factory=dict)  # the filters as given, for links

    @classmethod
    def from_request(cls, request: HttpRequest) -> TableQuery:
        get = request.GET
        query = cls(page=get.get("page", "1"))
        query.status = get.get("status", "").strip()
        if query.status and query.status not in RunStatus.values:
            raise BadFilter("status", f"{query.status!r} is none of {', '.join(RunStatus.values)}")
        query.tag = get.get("tag", "").strip()
        if raw := get.get("experiment", "").strip():
            if not raw.isdigit():
                raise BadFilter("experiment", f"{raw!r} is not an experiment id")
            query.experiment = int(raw)
        query.q = get.get("q", "").strip()
        query.sort = get.get("sort", "").strip() or DEFAULT_SORT
        if query.sort.lstrip("-") not in SORTS:
            raise BadFilter("sort", f"{query.sort!r} is none of {', '.join(SORTS)} (- reverses)")
        query.params = {k: v for k in ("status", "tag", "experiment", "q") if (v := get.get(k))}
        return query

    @property
    def filtered(self) -> bool:
        return bool(self.status or self.tag or self.experiment or self.q)


def _latest(name: str) -> Subquery:
    newest = MetricPoint.objects.filter(run=OuterRef("pk"), name=name).order_by("-id")
    return Subquery(newest.values("value")[:1])


def latest_reward() -> Coalesce:
    return Coalesce(*(_latest(name) for name in REWARD_METRICS))


def run_rows(user, query: TableQuery):
    """The runs ``user`` may see that match ``query``, in its order (a lazy queryset)."""
    runs = Run.objects.visible_to(user)
    if query.status:
        runs = runs.filter(status=query.status)
    if query.tag:
        runs = runs.filter(tags__name=query.tag)
    if query.experiment is not None:
        runs = runs.filter(experiment_id=query.experiment)
    if query.q:
        q = query.q
        tagged = Run.tags.through.objects.filter(run_id=OuterRef("pk"), tag__name__icontains=q)
        match = (
            Q(experiment__name__icontains=q)
            | Q(experiment__project__icontains=q)
            | Q(notes__icontains=q)
            | Exists(tagged)
        )
        if q.lstrip("#").isdigit():
            match |= Q(number=int(q.lstrip("#")))
        runs = runs.filter(match)
    key = query.sort.lstrip("-")
    if key == "reward":
        runs = runs.annotate(latest_reward=latest_reward())
    if key == "duration":
        start, end = Coalesce("started_at", "created"), Coalesce("finished_at", Now())
        runs = runs.annotate(duration=ExpressionWrapper(end - start, output_field=DurationField()))
    descending = query.sort.startswith("-")
    order = []
    for name in SORTS[key]:
        # unknown figures last either way; NOT NULL columns keep their index order ("-id")
        nulls = {"nulls_last": True} if name in NULLABLE else {}
        order.append(F(name).desc(**nulls) if descending else F(name).asc(**nulls))
    return runs.order_by(*order)


def page_of(user, query: TableQuery):
    """The page of rows to show: runs with their experiment, owner, tags and latest reward."""
    rows = (
        run_rows(user, query)
        .select_related("experiment__owner")
        .defer("config_yaml", "config", "experiment__config_yaml", "experiment__config")
    )
    page = Paginator(rows, PAGE_SIZE).get_page(query.page)
    ids = [run.pk for run in page.object_list]
    shown = (
        Run.objects.filter(pk__in=ids).annotate(reward=latest_reward()).values_list("pk", "reward")
    )
    rewards = dict(shown)
    tags: dict[int, list[str]] = {pk: [] for pk in ids}
    links = Run.tags.through.objects.filter(run_id__in=ids).order_by("tag__name")
    for run_id, name in links.values_list("run_id", "tag__name"):
        tags[run_id].append(name)
    for run in page.object_list:
        run.latest_reward = rewards.get(run.pk)
        run.tag_names = tags[run.pk]
        run.duration = run_duration(run)
    return page


def run_duration(run: Run) -> timedelta | None:
    from django.utils import timezone

    start = run.started_at or run.created
    return (run.finished_at or timezone.now()) - start if start else None


def duration_text(delta: timedelta | None) -> str:
    if delta is None:
        return ""
    seconds = int(max(delta.total_seconds(), 0))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {seconds:02d}s"


def _headers(query: TableQuery) -> list[dict]:
    """Column headers; a sortable one links to its sort (reversed when it is the current)."""
    out = []
    for label, key in COLUMNS:
        link, mark = "", ""
        if key:
            current = query.sort.lstrip("-") == key
            descending = query.sort.startswith("-")
            sort = key if current and descending else f"-{key}"
            link = "?" + urlencode({**query.params, "sort": sort})
            mark = ("▼" if descending else "▲") if current else ""
        out.append({"label": label, "key": key, "link": link, "mark": mark})
    return out


@require_GET
def runs_table(request: HttpRequest) -> HttpResponse:
    user = request.user
    visible = Experiment.objects.visible_to(user)
    context = {
        "statuses": RunStatus.values,
        "experiments": visible.order_by("name").values_list("pk", "name"),
        "tags": Tag.objects.filter(runs__in=Run.objects.visible_to(user))
        .order_by("name")
        .values_list("name", flat=True)
        .distinct(),
    }
    try:
        query = TableQuery.from_request(request)
    except BadFilter as err:
        context.update(query=TableQuery(), error=str(err), headers=_headers(TableQuery()))
        return render(request, "runs/list.html", context, status=400)
    page = page_of(user, query)
    for run in page.object_list:
        run.duration_text = duration_text(run.duration)
    keep = urlencode({**query.params, "sort": query.sort})
    context.update(query=query, page=page, keep=keep, headers=_headers(query))
    return render(request, "runs/list.html", context)
