"""``POST /runs/<id>/tags/`` (``tags``: comma-separated) and ``POST /runs/<id>/notes/``
(``notes``): the run page's forms for a run's tags and notes. Thin: each authorizes (another
user's run is a 404), calls its action in ``webapp.runs.annotations`` and answers, with the
run's tags and notes as JSON for a ``fetch`` (``Accept: application/json``) or a redirect back
to the run page. A refused value is a 400 naming the field, and nothing is written."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from webapp.accounts.access import authorize_hidden
from webapp.audit.record import Actor
from webapp.errors import ActionError
from webapp.refusals import wants_json
from webapp.runs.annotations import run_tags, set_run_notes, set_run_tags
from webapp.runs.models import Run


def _answer(request: HttpRequest, run: Run, change, note: str) -> HttpResponse:
    try:
        change()
    except ActionError as err:
        if wants_json(request):
            return JsonResponse(err.as_json(), status=err.status)
        context = {"message": err.message, "errors": err.errors}
        context.update(back_url=run.get_absolute_url(), back_label="Back to the run")
        return render(request, "runs/refused.html", context, status=err.status)
    if wants_json(request):
        return JsonResponse({"id": run.pk, "tags": run_tags(run), "notes": run.notes})
    messages.success(request, note)
    return redirect(run.get_absolute_url())


@require_POST
def tags(request: HttpRequest, pk: int) -> HttpResponse:
    actor = Actor.from_request(request)
    run = authorize_hidden(actor, Run, pk, "run.tags")
    value = request.POST.get("tags", "")
    return _answer(request, run, lambda: set_run_tags(actor, run, value), "Tags saved.")


@require_POST
def notes(request: HttpRequest, pk: int) -> HttpResponse:
    actor = Actor.from_request(request)
    run = authorize_hidden(actor, Run, pk, "run.notes")
    value = request.POST.get("notes", "")
    return _answer(request, run, lambda: set_run_notes(actor, run, value), "Notes saved.")
