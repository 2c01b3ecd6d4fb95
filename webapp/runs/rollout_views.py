"""The rollout explorer: ``GET /runs/<id>/rollouts/`` (the page: step picker, sort, search,
the rollouts of a step by task group, each with its token view) and ``GET
/runs/<id>/rollouts.json`` (its data, ``webapp.runs.rollouts``). Same access rule as the run
page; a bad parameter is a 400 ``{"detail"}`` naming it."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.accounts.access import authorize
from webapp.audit.record import Actor
from webapp.refusals import detail
from webapp.runs.live_views import authorize_json
from webapp.runs.models import Run
from webapp.runs.rollouts import BadQuery, RolloutQuery, rollout_page


@require_GET
def rollouts_page(request: HttpRequest, pk: int) -> HttpResponse:
    run = authorize(Actor.from_request(request), Run, pk, "run.view")
    return render(request, "runs/rollouts.html", {"run": run, "experiment": run.experiment})


@login_not_required  # a signed-out fetch gets a 403 {"detail"}, not the login page
@require_GET
def rollouts_json(request: HttpRequest, pk: int) -> JsonResponse:
    run, refused = authorize_json(Actor.from_request(request), Run, pk, "run.view", "run")
    if refused is not None:
        return refused
    try:
        query = RolloutQuery.parse(request.GET)
    except BadQuery as err:
        return detail(str(err), 400)
    return JsonResponse(rollout_page(run, query))
