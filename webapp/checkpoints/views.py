"""Checkpoint pages: POST ``/checkpoints/<id>/convert/`` queues the Hugging Face conversion
(``actions.convert_checkpoint``) and goes back to the run page; ``/checkpoints/<id>/fork/``
shows the experiment form (fields and a YAML tab) prefilled with the run's config resuming from
the checkpoint (GET) and launches the fork (POST, ``webapp.checkpoints.forks.fork_run``); ``GET
/checkpoints/<id>/files.json`` lists the files of its converted directory (the run page's file
list); ``GET /checkpoints/run/<run id>/disk.json`` the run's job dir size on disk (the line
under the run page's checkpoint rows)."""

from __future__ import annotations

from pathlib import Path

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from webapp.accounts.access import authorize
from webapp.audit.record import Actor
from webapp.checkpoints.actions import convert_checkpoint, job_dir_usage, refuse_if_pruned
from webapp.checkpoints.forks import fork_config_yaml, fork_run
from webapp.checkpoints.models import Checkpoint, HFStatus
from webapp.errors import ActionError
from webapp.experiments.config_policy import parse_yaml
from webapp.experiments.form_build import attach_errors, build_form
from webapp.experiments.form_post import posted_yaml, refused_form
from webapp.refusals import wants_json
from webapp.runs.live import checkpoint_state
from webapp.runs.live_views import authorize_json
from webapp.runs.models import Run


@require_POST
def convert(request: HttpRequest, pk: int) -> HttpResponse:
    actor = Actor.from_request(request)
    if wants_json(request):  # the run page's Convert button: {"checkpoint"} or {"detail"}
        checkpoint, refused = authorize_json(
            actor, Checkpoint, pk, "checkpoint.convert", "checkpoint"
        )
        if refused is not None:
            return refused
        try:
            checkpoint = convert_checkpoint(actor, checkpoint)
        except ActionError as err:
            return JsonResponse({"detail": err.message, "errors": err.errors}, status=err.status)
        return JsonResponse({"checkpoint": checkpoint_state(checkpoint)})
    checkpoint = authorize(actor, Checkpoint, pk, "checkpoint.convert")
    try:
        convert_checkpoint(actor, checkpoint)
    except ActionError as err:
        context = {"checkpoint": checkpoint, "message": err.message}
        return render(request, "checkpoints/convert_refused.html", context, status=err.status)
    messages.success(request, f"Converting {checkpoint} to Hugging Face weights.")
    return redirect(checkpoint.run.get_absolute_url())


MAX_LISTED_FILES = 1000


def _hf_files(root: Path) -> tuple[list[dict], bool]:
    """Regular files under ``root`` (symlinks neither followed nor listed), by path; whether
    the list was cut at MAX_LISTED_FILES."""
    found: list[dict] = []
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        if len(found) == MAX_LISTED_FILES:
            return found, True
        found.append({"path": path.relative_to(root).as_posix(), "size_bytes": path.stat().st_size})
    return found, False


def converted_dir(checkpoint: Checkpoint) -> tuple[Path | None, str]:
    """The checkpoint's converted directory, or None and why there is none to read."""
    root = Path(checkpoint.hf_path) if checkpoint.hf_path else None
    if checkpoint.hf_status == HFStatus.READY and root is not None and root.is_dir():
        return root, ""
    where = f"{checkpoint.stage}/global_step_{checkpoint.step}".lstrip("/")
    if checkpoint.hf_status != HFStatus.READY or root is None:
        status = checkpoint.get_hf_status_display()
        return None, f"{where} has no converted directory (HF status: {status})"
    return None, f"{where}: the converted directory {root} is gone from disk"


@require_GET
def files_json(request: HttpRequest, pk: int) -> JsonResponse:
    """The converted (Hugging Face) directory of a checkpoint and its files; 409 with the
    reason while it has none."""
    checkpoint = authorize(Actor.from_request(request), Checkpoint, pk, "checkpoint.view")
    root, reason = converted_dir(checkpoint)
    if root is None:
        return JsonResponse({"error": reason, "hf_status": checkpoint.hf_status}, status=409)
    files, truncated = _hf_files(root)
    body = {"id": checkpoint.pk, "hf_path": str(root), "files": files, "truncated": truncated}
    return JsonResponse(body)


@require_GET
def disk_json(request: HttpRequest, run_pk: int) -> JsonResponse:
    """``{job_dir, total_bytes, checkpoint_bytes, checkpoints_on_disk}`` of a run."""
    run = authorize(Actor.from_request(request), Run, run_pk, "run.view")
    return JsonResponse(job_dir_usage(run))


def _fork_page(request: HttpRequest, checkpoint: Checkpoint, **context) -> HttpResponse:
    """The fork form: the experiment form's fields and YAML tab, prefilled with the parent's
    config resuming; a refused fork's errors beside their fields and listed above."""
    error: ActionError | None = context.pop("error", None)
    if error is not None:
        attach_errors(context["form"], error.errors, error.message)
        context.update(message=error.message, errors=error.errors)
    context = {
        "checkpoint": checkpoint,
        "parent": checkpoint.run,
        "message": "",
        "errors": {},
        **context,
    }
    return render(request, "runs/fork.html", context, status=error.status if error else 200)


@require_http_methods(["GET", "POST"])
def fork(request: HttpRequest, pk: int) -> HttpResponse:
    actor = Actor.from_request(request)
    checkpoint = authorize(actor, Checkpoint, pk, "run.fork")
    if request.method == "GET":
        text = fork_config_yaml(checkpoint)
        page = {"form": build_form(parse_yaml(text) or {}), "yaml_text": text, "tab": "form"}
        try:
            refuse_if_pruned(checkpoint, "fork from")
        except ActionError as err:  # a bookmarked link to a checkpoint retention deleted since
            return _fork_page(request, checkpoint, error=err, **page)
        return _fork_page(request, checkpoint, **page)
    # the page posts its tab's button; a client posting config_yaml alone means that YAML
    source = "form" if "base_yaml" in request.POST else "yaml"
    try:
        text, _ = posted_yaml(request, source)
        run = fork_run(actor, checkpoint, text)
    except ActionError as err:
        form, text, tab = refused_form(request, fork_config_yaml(checkpoint), source)
        return _fork_page(request, checkpoint, form=form, yaml_text=text, tab=tab, error=err)
    where = (
        f"{checkpoint.stage} step {checkpoint.step}"
        if checkpoint.stage
        else f"step {checkpoint.step}"
    )
    messages.success(
        request, f"Forked run #{checkpoint.run.number} from {where} as run #{run.number}."
    )
    return redirect(run.get_absolute_url())
