"""``/runs/<id>/evaluations/``: choose checkpoints of the run (those still on disk; the pruned
ones are only counted) and eval tasksets and launch a bench job (POST,
``evaluation.evaluate_checkpoints``); every evaluation of the run as a checkpoint x taskset
table of accuracy, the best marked, with its Convert button (GET)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from webapp.accounts.access import authorize
from webapp.audit.record import Actor
from webapp.checkpoints.evaluation import (
    accuracy_table,
    eval_taskset_names,
    evaluate_checkpoints,
)
from webapp.checkpoints.models import Checkpoint
from webapp.errors import ActionError
from webapp.runs.models import Run


@require_http_methods(["GET", "POST"])
def evaluations(request: HttpRequest, pk: int) -> HttpResponse:
    actor = Actor.from_request(request)
    run = authorize(
        actor, Run, pk, "checkpoint.evaluate" if request.method == "POST" else "run.view"
    )
    status, context = 200, {"message": "", "errors": {}, "chosen": set(), "chosen_tasksets": []}
    if request.method == "POST":
        ids = [i for i in request.POST.getlist("checkpoint") if i.isdigit()]
        chosen = list(Checkpoint.objects.filter(run=run, pk__in=ids))
        tasksets = request.POST.getlist("taskset")
        context.update(chosen={c.pk for c in chosen}, chosen_tasksets=tasksets)
        try:
            evaluation = evaluate_checkpoints(actor, run, chosen, tasksets)
        except ActionError as err:
            context.update(message=err.message, errors=err.errors)
            status = err.status
        else:
            messages.success(
                request, f"Evaluating {len(chosen)} checkpoint(s) on {', '.join(tasksets)}."
            )
            return redirect(evaluation.get_absolute_url())
    context.update(
        run=run,
        experiment=run.experiment,
        # a pruned checkpoint cannot be evaluated: the picker lists those on disk, and counts
        # the rest in one line
        checkpoints=run.checkpoints.filter(pruned=False).order_by("stage", "step"),
        pruned_count=run.checkpoints.filter(pruned=True).count(),
        tasksets=eval_taskset_names(run),
        tables=[(e, accuracy_table(e)) for e in run.evaluations.all()],
    )
    return render(request, "runs/evaluations.html", context, status=status)
