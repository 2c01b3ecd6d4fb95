"""``/runs/``: the table of every run the user may see, across their experiments (staff: all).

One row per run: status, stage, step, the latest reward, the eval accuracy (last and best),
duration, tags, owner. Filters ``?status=``, ``?tag=``, ``?experiment=<id>``, a search ``?q=``
(experiment name or project, the run's notes, a tag, ``#<number>``), a sort ``?sort=<key>`` (a
leading ``-`` reverses it) and ``?page=``; all of it is done by the database, a page of
PAGE_SIZE rows at a time, so the page costs the same at 10 runs and at 10,000. A filter value
the page does not know answers 400 naming the parameter.

The latest reward is the run's ``latest_reward`` column, which the ingestor keeps
(``webapp.runs.telemetry.update_latest_reward``: the newest point of ``REWARD_METRICS``, the
explorer's mean reward first), so neither the page nor the sort by reward reads metric points.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from html import escape  # what django.utils.html.escape does, without its lazy-text wrapper
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.db import connection
from django.db.models import (
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    FloatField,
    Func,
    OuterRef,
    Q,
)
from django.db.models.functions import Coalesce, Now
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET

from webapp.experiments.models import Experiment, Tag
from webapp.runs.models import Run, RunStatus

PAGE_SIZE = 50
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


class _SqliteSeconds(Func):
    """SQLite: ``end - start`` in seconds by the database's own functions (Django's datetime
    subtraction on SQLite calls a Python function per row: 10k calls to sort 10k runs). Whole
    seconds (``julianday`` of the text up to the seconds, rounded) and the fraction (the text
    after them) are subtracted apart, so the result is exact to the microsecond as Django's
    is."""

    output_field = FloatField()

    def as_sql(self, compiler, connection, **extra):
        end, end_params = compiler.compile(self.source_expressions[0])
        start, start_params = compiler.compile(self.source_expressions[1])
        sql = (
            f"(ROUND((julianday(substr({end}, 1, 19)) - julianday(substr({start}, 1, 19)))"
            f" * 86400) + (CAST(substr({end}, 20) AS REAL) - CAST(substr({start}, 20) AS REAL)))"
        )
        return sql, (*end_params, *start_params, *end_params, *start_params)


def _duration_expression():
    """A run's duration, to sort by: (finished, else now) - (started, else created)."""
    start, end = Coalesce("started_at", "created"), Coalesce("finished_at", Now())
    if connection.vendor == "sqlite":
        return _SqliteSeconds(end, start)
    return ExpressionWrapper(end - start, output_field=DurationField())


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
        # the runs of a matching tag, found once (not a correlated subquery per run)
        tagged = Run.tags.through.objects.filter(tag__name__icontains=q).values("run_id")
        match = (
            Q(experiment__name__icontains=q)
            | Q(experiment__project__icontains=q)
            | Q(notes__icontains=q)
            | Q(pk__in=tagged)
        )
        if q.lstrip("#").isdigit():
            match |= Q(number=int(q.lstrip("#")))
        runs = runs.filter(match)
    key = query.sort.lstrip("-")
    if key == "duration":
        runs = runs.annotate(duration=_duration_expression())
    descending = query.sort.startswith("-")
    order = []
    for name in SORTS[key]:
        # unknown figures last either way; NOT NULL columns keep their index order ("-id")
        nulls = {"nulls_last": True} if name in NULLABLE else {}
        order.append(F(name).desc(**nulls) if descending else F(name).asc(**nulls))
    return runs.order_by(*order)


def page_of(user, query: TableQuery):
    """The page of rows to show: runs with their experiment, owner and tags.

    The database orders and counts the matching runs by id only (a sort of narrow rows, not
    of every column of every run), then the page's PAGE_SIZE runs are read by primary key."""
    ordered = run_rows(user, query).values_list("pk", flat=True)
    if query.q:
        # A search is a filter the planner cannot estimate (LIKE '%..%' OR ...): with a LIMIT
        # PostgreSQL walks the primary key backwards testing every run (0.3 s at 10k runs);
        # read every matching id in one pass instead and cut the page from it.
        ordered = list(ordered)
    page = Paginator(ordered, PAGE_SIZE).get_page(query.page)
    ids = list(page.object_list)
    rows = (
        Run.objects.filter(pk__in=ids)
        .select_related("experiment__owner")
        .defer("config_yaml", "config", "experiment__config_yaml", "experiment__config")
    )
    by_pk = {run.pk: run for run in rows}
    page.object_list = [by_pk[pk] for pk in ids if pk in by_pk]
    tags: dict[int, list[str]] = {pk: [] for pk in ids}
    links = Run.tags.through.objects.filter(run_id__in=ids).order_by("tag__name")
    for run_id, name in links.values_list("run_id", "tag__name"):
        tags[run_id].append(name)
    for run in page.object_list:
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


def tag_names(user) -> list[str]:
    """The names of the tags on runs ``user`` may see, sorted: one EXISTS probe per tag (the
    tags are few), not a DISTINCT over every tagged run."""
    if user is None or not user.is_authenticated:
        return []
    tagged = Run.tags.through.objects.filter(tag_id=OuterRef("pk"))
    if not user.is_staff:  # Run.objects.visible_to, as a join the probe stops at
        tagged = tagged.filter(run__experiment__owner=user)
    return list(Tag.objects.filter(Exists(tagged)).order_by("name").values_list("name", flat=True))


def _options(choices, selected) -> str:
    """``<option>``s of (value, label) pairs, the one equal to ``selected`` selected: written
    here in one pass rather than by a template loop (a user may own thousands of experiments)."""
    return mark_safe(
        "".join(
            f'<option value="{escape(str(value))}"{" selected" if value == selected else ""}>'
            f"{escape(str(label))}</option>"
            for value, label in choices
        )
    )


def filter_options(user, query: TableQuery) -> dict[str, str]:
    """The filter form's tag and experiment ``<option>``s (after the "all" option)."""
    experiments = Experiment.objects.visible_to(user).order_by("name").values_list("pk", "name")
    return {
        "tag_options": _options(((t, t) for t in tag_names(user)), query.tag),
        "experiment_options": _options(experiments, query.experiment),
    }


@require_GET
def runs_table(request: HttpRequest) -> HttpResponse:
    user = request.user
    context = {"statuses": RunStatus.values}
    try:
        query = TableQuery.from_request(request)
    except BadFilter as err:
        context.update(filter_options(user, TableQuery()))
        context.update(query=TableQuery(), error=str(err), headers=_headers(TableQuery()))
        return render(request, "runs/list.html", context, status=400)
    context.update(filter_options(user, query))
    page = page_of(user, query)
    for run in page.object_list:
        run.duration_text = duration_text(run.duration)
    keep = urlencode({**query.params, "sort": query.sort})
    context.update(query=query, page=page, keep=keep, headers=_headers(query))
    return render(request, "runs/list.html", context)
