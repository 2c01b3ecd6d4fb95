"""``GET /runs/<id>/live.json``: the live run page's snapshot (``webapp.runs.live.snapshot``),
or with ``?after=<seq>`` the run's events after that sequence number (at most 5000, ``more``
when there are further ones). Same access rule as the run page (404 / 403 as JSON
``{"detail"}``); a bad ``after`` is a 400 naming it."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from webapp.accounts.access import authorize
from webapp.audit.record import Actor
from webapp.refusals import detail
from webapp.runs import live
from webapp.runs.models import Run


def authorize_json(actor: Actor, model, pk: int, action: str, label: str):
    """``authorize`` with its 404/403 as ``{"detail"}`` answers: (obj, None) or (None, answer)."""
    if actor.user is None:
        return None, detail("sign in first", 403)
    try:
        return authorize(actor, model, pk, action), None
    except Http404:
        return None, detail(f"{label} {pk} does not exist", 404)
    except PermissionDenied:
        return None, detail(f"{label} {pk} belongs to another user", 403)


@login_not_required  # a signed-out fetch gets a 403 {"detail"}, not the login page
@require_GET
def live_json(request: HttpRequest, pk: int) -> JsonResponse:
    actor = Actor.from_request(request)
    run, refused = authorize_json(actor, Run, pk, "run.view", "run")
    if refused is not None:
        return refused
    after = request.GET.get("after")
    if after is None:
        return JsonResponse(live.snapshot(run))
    try:
        seq = int(after)
        if seq < 0:
            raise ValueError
    except ValueError:
        return detail(f"after: must be a sequence number (an integer >= 0), got {after!r}", 400)
    return JsonResponse(live.events_after(run, seq))
