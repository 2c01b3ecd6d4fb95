"""Run pages: ``/runs/<id>/`` (status, times, config snapshot, job dir, error),
``/runs/compare/?ids=1,2`` (the config differences of the chosen runs), and the POSTs that
launch, cancel and clone. Thin: each reads the request, calls one action and answers.

A refused action (``ActionError``: Redis or Ray down, a config that no longer passes the
checks, a run that already ended) answers its 4xx with a page that shows the message at the
top and links back to where the user came from; nothing was written.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from webapp.accounts.access import authorize
from webapp.audit.record import Actor
from webapp.errors import ActionError
from webapp.experiments.actions import clone_run_config
from webapp.experiments.models import Experiment
from webapp.runs import actions
from webapp.runs.compare import MAX_RUNS, config_differences, parse_ids
from webapp.runs.models import Run, RunStatus


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
    messages.success(request, f"Run #{run.number} of {experiment} is queued.")
    return redirect(run.get_absolute_url())


@require_POST
def cancel(request: HttpRequest, pk: int) -> HttpResponse:
    actor = Actor.from_request(request)
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
        rows = config_differences(runs)
    except ActionError as err:
        return _refused(request, err, "/experiments/", "Back to the experiments")
    context = {"runs": runs, "rows": rows, "max_runs": MAX_RUNS}
    return render(request, "runs/compare.html", context)
