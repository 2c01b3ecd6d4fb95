"""``/runs/import/``: the page that reads a job dir in as a run (``job_dir.import_job_dir``).
Routed in ``webapp/urls.py`` (name ``run-import``): the runs app's URLs never import this box,
which sits above it. Thin: it reads the form, calls the action and answers.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from webapp.accounts.access import authorize
from webapp.audit.record import Actor
from webapp.errors import ActionError
from webapp.experiments.models import Experiment
from webapp.ingest.job_dir import import_job_dir
from webapp.runs.claims import granted_roots, runs_area


@require_http_methods(["GET", "POST"])
def import_page(request: HttpRequest) -> HttpResponse:
    """``/runs/import/``: a job dir (and optionally the experiment to put it under, or its
    config) read in as a run with its whole history. The page names the user's runs area and
    granted roots; a refused claim is its 403 with the rule beside the field."""
    actor = Actor.from_request(request)
    experiments = Experiment.objects.visible_to(request.user).order_by("name")
    context = {"experiments": experiments, "values": {}, "errors": {}, "message": ""}
    context["runs_area"] = runs_area(request.user)
    context["granted_roots"] = granted_roots(request.user)
    if request.method == "POST":
        values = {k: request.POST.get(k, "") for k in ("job_dir", "experiment", "config_yaml")}
        context["values"] = values
        try:
            experiment = None
            if values["experiment"]:
                experiment = authorize(actor, Experiment, values["experiment"], "run.import")
            run = import_job_dir(
                actor,
                job_dir=values["job_dir"],
                config_yaml=values["config_yaml"] or None,
                experiment=experiment,
            )
        except ActionError as err:
            context.update(message=err.message, errors=err.errors)
            return render(request, "runs/import.html", context, status=err.status)
        note = f"Imported {run.job_dir} as run #{run.number} of {run.experiment} ({run.status})."
        if run.import_problems:
            note += f" Skipped {len(run.import_problems)} unreadable line(s): "
            note += "; ".join(run.import_problems[:3])
        messages.success(request, note)
        return redirect(run.get_absolute_url())
    return render(request, "runs/import.html", context)
