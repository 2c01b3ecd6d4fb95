"""Checkpoint pages: POST ``/checkpoints/<id>/convert/`` queues the Hugging Face conversion
(``actions.convert_checkpoint``) and goes back to the run page."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from webapp.accounts.access import authorize
from webapp.audit.record import Actor
from webapp.checkpoints.actions import convert_checkpoint
from webapp.checkpoints.models import Checkpoint
from webapp.errors import ActionError


@require_POST
def convert(request: HttpRequest, pk: int) -> HttpResponse:
    actor = Actor.from_request(request)
    checkpoint = authorize(actor, Checkpoint, pk, "checkpoint.convert")
    try:
        convert_checkpoint(actor, checkpoint)
    except ActionError as err:
        context = {"checkpoint": checkpoint, "message": err.message}
        return render(request, "checkpoints/convert_refused.html", context, status=err.status)
    messages.success(request, f"Converting {checkpoint} to Hugging Face weights.")
    return redirect(checkpoint.run.get_absolute_url())
