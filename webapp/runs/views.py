"""Run pages: ``/runs/<id>/`` (status, times, config snapshot, job dir, error),
``/runs/compare/?ids=1,2`` (the config differences of the chosen runs), the full log as text
``/runs/<id>/logs.txt[?actor=&level=]`` (streamed; another user's run: 404), and the POSTs
that launch, cancel and clone. Thin: each reads the request, calls one action and answers.
(``/runs/import/`` is ``webapp.ingest.views``'s.)

A refused action (``ActionError``: Redis or Ray down, a config that no longer passes the
checks, a run that already ended) answers its 4xx with a page that shows the message at the
top and links back to where the user came from; nothing was written.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from webapp.accounts.access import authorize, authorize_hidden
from webapp.audit.record import Actor
from webapp.errors import ActionError
from webapp.experiments.actions import clone_run_config
from webapp.experiments.models import Experiment
from webapp.refusals import wants_json
from webapp.runs import actions
from webapp.runs.compare import (
    MAX_RUNS,
    compare_series,
    config_differences,
    config_flats,
    parse_ids,
    parse_names,
)
from webapp.runs.compare_summary import parallel_coordinates, summary
from webapp.runs.live import run_state
from webapp.runs.live_views import authorize_json
from webapp.runs.models import LogLine, Run, RunStatus

LOG_CHUNK = 2000


def _refused(request: HttpRequest, err: ActionError, back_url: str, back_label: str):
    context = {"message": err.message, "errors": err.errors, "back_url": back_url}
    context["back_label"] = back_label
    return render(request, "runs/refused.html", context, status=err.status)


@require_GET
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = authorize(Actor.from_request(request), Run, pk, "run.view")
    context = {"run": run, "experiment": run.experiment, "duration_s": actions.elapsed(run)}
    return render(request, "runs/run_detail.html", context)


@require_POST
def launch(request: HttpRequest, experiment_id: int) -> HttpResponse:
    actor = Actor.from_request(request)
    experiment = authorize(actor, Experiment, experiment_id, "run.launch")
    try:
        run = actions.launch_run(actor, experiment)
    except ActionError as err:
        return _refused(request, err, experiment.get_absolute_url(), f"Back to {experiment}")
    messages.success(request, f"Launched run #{run.number} of {experiment}.")
    return redirect(run.get_absolute_url())


@require_POST
def cancel(request: HttpRequest, pk: int) -> HttpResponse:
    actor = Actor.from_request(request)
    if wants_json(request):  # the run page's Cancel button: {"run": RunState} or {"detail"}
        run, refused = authorize_json(actor, Run, pk, "run.cancel", "run")
        if refused is not None:
            return refused
        try:
            run = actions.cancel_run(actor, run)
        except ActionError as err:
            return JsonResponse({"detail": err.message, "errors": err.errors}, status=err.status)
        return JsonResponse({"run": run_state(Run.objects.get(pk=run.pk))})
    run = authorize(actor, Run, pk, "run.cancel")
    try:
        run = actions.cancel_run(actor, run)
    except ActionError as err:
        return _refused(request, err, run.get_absolute_url(), "Back to the run")
    done = run.status == RunStatus.CANCELLED
    note = "cancelled" if done else "cancel requested; its Ray job is being stopped"
    messages.success(request, f"Run #{run.number}: {note}.")
    return redirect(run.get_absolute_url())


@require_POST
def clone(request: HttpRequest, pk: int) -> HttpResponse:
    actor = Actor.from_request(request)
    run = authorize(actor, Run, pk, "run.clone")
    try:
        experiment = clone_run_config(actor, run)
    except ActionError as err:
        return _refused(request, err, run.get_absolute_url(), "Back to the run")
    messages.success(request, f"New experiment {experiment} with the config of {run}.")
    return redirect(experiment.get_absolute_url())


@require_GET
def compare(request: HttpRequest) -> HttpResponse:
    actor = Actor.from_request(request)
    try:
        runs = [
            authorize(actor, Run, pk, "run.view") for pk in parse_ids(request.GET.get("ids", ""))
        ]
        flats = config_flats(runs)
    except ActionError as err:
        return _refused(request, err, "/experiments/", "Back to the experiments")
    table = summary(runs)
    context = {
        "runs": runs,
        "rows": config_differences(flats),
        "summary": table,
        "parallel": parallel_coordinates(runs, table, flats),
        "max_runs": MAX_RUNS,
    }
    return render(request, "runs/compare.html", context)


@require_GET
def compare_data(request: HttpRequest) -> HttpResponse:
    """``/runs/compare/data.json?ids=1,2&names=a,b``: the runs' metric series (compare.py);
    each id through the access rule (404 unknown, 403 + audit another user's), 400 bad input."""
    actor = Actor.from_request(request)
    try:
        ids = parse_ids(request.GET.get("ids", ""))
        names = parse_names(request.GET.get("names"))
    except ActionError as err:
        return JsonResponse(err.as_json(), status=err.status)
    runs = [authorize(actor, Run, pk, "run.view") for pk in ids]
    return JsonResponse(compare_series(runs, names))


def _values(request: HttpRequest, name: str) -> list[str]:
    """``?actor=trainer,explorer`` (or the parameter repeated): the listed values, trimmed."""
    return [v.strip() for raw in request.GET.getlist(name) for v in raw.split(",") if v.strip()]


def log_text_line(line: LogLine) -> str:
    from datetime import UTC, datetime

    when = datetime.fromtimestamp(line.wall_time, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    stage = f" [{line.stage}]" if line.stage else ""
    return f"{when} {line.level or '-'} {line.actor or '-'}{stage} {line.text}\n"


@require_GET
def logs_txt(request: HttpRequest, pk: int) -> StreamingHttpResponse:
    """Every log line of the run in order, optionally only some actors / levels, as a
    download streamed in chunks (a run's log may be large)."""
    run = authorize_hidden(Actor.from_request(request), Run, pk, "run.view")
    lines = LogLine.objects.filter(run=run).order_by("id")
    if actors := _values(request, "actor"):
        lines = lines.filter(actor__in=actors)
    if levels := _values(request, "level"):
        spellings = {form for level in levels for form in (level, level.upper(), level.lower())}
        lines = lines.filter(level__in=spellings)
    rows = lines.only("wall_time", "level", "actor", "stage", "text").iterator(LOG_CHUNK)
    response = StreamingHttpResponse(
        (log_text_line(line) for line in rows), content_type="text/plain; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-log.txt"'
    return response
