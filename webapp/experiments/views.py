"""Experiment pages: list, create/edit (schema form + YAML tab), detail with its runs, YAML
download, clone, delete, version history with diffs. Views read the request, call one action,
and render; a refused action is re-rendered with its messages and its 4xx status."""

from __future__ import annotations

import difflib

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Case, F, IntegerField, Q, Value, When
from django.db.models.functions import Coalesce, Greatest
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from webapp.accounts.access import authorize
from webapp.audit.record import Actor
from webapp.errors import ActionError, error_list
from webapp.experiments import actions
from webapp.experiments.config_policy import PATHS_EXIST_ELSEWHERE, canonical_yaml, parse_yaml
from webapp.experiments.form_build import attach_errors, build_form
from webapp.experiments.form_merge import merge_form
from webapp.experiments.form_model import ExperimentForm
from webapp.experiments.form_post import dir_name, named_after_experiment, posted_yaml, refused_form
from webapp.experiments.models import Experiment, Tag
from webapp.run_status import ACTIVE_STATUSES, RunStatus

PAGE_SIZE = 25
SORTS = {
    "updated": ["-last_activity", "-id"],
    "name": ["name", "id"],
    "created": ["-created", "-id"],
    "accuracy": [F("last_run__best_eval_accuracy").desc(nulls_last=True), "-updated"],
}

# "updated" is the last activity: the experiment's own edit or its last run's launch, start,
# heartbeat or end, whichever is later (a launch does not save the experiment row)
LAST_ACTIVITY = Greatest(
    "updated",
    *(
        Coalesce(f"last_run__{field}", "updated")
        for field in ("created", "started_at", "last_heartbeat", "finished_at")
    ),
)

# whatever the sort, experiments with a run in progress come first (what a user looks for)
RUNNING_FIRST = Case(
    When(last_run__status__in=list(ACTIVE_STATUSES), then=Value(0)),
    default=Value(1),
    output_field=IntegerField(),
).asc()


@require_GET
def experiment_list(request: HttpRequest) -> HttpResponse:
    user = request.user
    qs = (
        Experiment.objects.visible_to(user)
        .select_related("last_run", "owner")
        .annotate(last_activity=LAST_ACTIVITY)
        # the list shows no config: leave the YAML and JSON columns unread
        .defer("config_yaml", "config", "last_run__config_yaml", "last_run__config")
    )
    q = request.GET.get("q", "").strip()
    if q:
        qs = qs.filter(Q(name__icontains=q) | Q(project__icontains=q) | Q(description__icontains=q))
    if project := request.GET.get("project", "").strip():
        qs = qs.filter(project=project)
    if tag := request.GET.get("tag", "").strip():
        qs = qs.filter(tags__name=tag)
    status = request.GET.get("status", "").strip()
    if status == "never":
        qs = qs.filter(last_run__isnull=True)
    elif status in RunStatus.values:
        qs = qs.filter(last_run__status=status)
    owner = request.GET.get("owner", "").strip() if user.is_staff else ""
    if owner:
        qs = qs.filter(owner__username=owner)
    sort = request.GET.get("sort", "updated")
    qs = qs.order_by(RUNNING_FIRST, *SORTS.get(sort, SORTS["updated"])).prefetch_related("tags")
    page = Paginator(qs, PAGE_SIZE).get_page(request.GET.get("page"))
    visible = Experiment.objects.visible_to(user)
    params = request.GET.copy()
    params.pop("page", None)
    return render(
        request,
        "experiments/list.html",
        {
            "page": page,
            "q": q,
            "project": project,
            "tag": tag,
            "status": status,
            "owner": owner,
            "sort": sort if sort in SORTS else "updated",
            "projects": visible.exclude(project="").order_by("project").values_list("project", flat=True).distinct(),
            "tags": Tag.objects.filter(experiments__in=visible).distinct(),
            "statuses": RunStatus.values,
            "sorts": list(SORTS),
            "query": params.urlencode(),
        },
    )  # fmt: skip


# ---------------------------------------------------------------- create / edit


def _form_page(
    request: HttpRequest,
    *,
    form: ExperimentForm,
    yaml_text: str,
    meta: dict[str, str],
    experiment: Experiment | None = None,
    tab: str = "form",
    status: int = 200,
    error: ActionError | None = None,
) -> HttpResponse:
    if error is not None:
        attach_errors(form, error.errors, error.message)
    meta_errors = {k.removeprefix("experiment."): v for k, v in form.errors.items()}
    if error is not None:
        meta_errors.update(
            {k.removeprefix("experiment."): v for k, v in error.errors.items() if k.startswith("experiment.")}
        )  # fmt: skip
    return render(
        request,
        "experiments/form.html",
        {
            "form": form,
            "yaml_text": yaml_text,
            "meta": meta,
            "meta_errors": meta_errors,
            "experiment": experiment,
            "tab": tab,
            "demo_yaml": "",
            # every error at once, in order (the YAML tab lists them; the form has them beside)
            "error_list": error_list(error.errors) if error is not None else [],
            "missing_paths": getattr(error, "missing", []),
            "paths_exist_elsewhere": _paths_exist_elsewhere(request),
        },
        status=status,
    )


def _meta_from_post(request: HttpRequest) -> dict[str, str]:
    return {
        key: request.POST.get(f"experiment.{key}", "")
        for key in ("name", "project", "description", "tags")
    }


def _paths_exist_elsewhere(request: HttpRequest) -> bool:
    """The form's checkbox: save although a path the config reads does not exist here."""
    return request.POST.get(f"experiment.{PATHS_EXIST_ELSEWHERE}") == "on"


def _refused_page(request, err, *, meta, experiment=None, fallback_yaml=""):
    """The form page again after a refused save: the user's text kept, the errors shown."""
    form, text, tab = refused_form(request, fallback_yaml)
    return _form_page(
        request,
        form=form,
        yaml_text=text,
        meta=meta,
        experiment=experiment,
        tab=tab,
        status=err.status,
        error=err,
    )


@require_http_methods(["GET", "POST"])
def experiment_new(request: HttpRequest) -> HttpResponse:
    actor = Actor.from_request(request)
    if request.method == "POST":
        meta = _meta_from_post(request)
        try:
            text, _ = posted_yaml(request)
            experiment = actions.create_experiment(
                actor,
                name=meta["name"],
                config_yaml=text,
                project=meta["project"],
                description=meta["description"],
                tags=meta["tags"],
                check_paths_exist=not _paths_exist_elsewhere(request),
            )
        except ActionError as err:
            return _refused_page(request, err, meta=meta)
        messages.success(request, f"experiment {experiment.name!r} created")
        return redirect(experiment.get_absolute_url())
    text = settings.RFT_DEMO_CONFIG.read_text()
    data = parse_yaml(text)
    form = build_form(data)
    return _form_page(
        request,
        form=form,
        yaml_text=canonical_yaml(data),
        meta={"name": "", "project": "", "description": "", "tags": ""},
    )


@require_http_methods(["GET", "POST"])
def experiment_edit(request: HttpRequest, pk: int) -> HttpResponse:
    actor = Actor.from_request(request)
    action = "experiment.update" if request.method == "POST" else "experiment.view"
    experiment = authorize(actor, Experiment, pk, action)
    if request.method == "POST":
        meta = _meta_from_post(request)
        try:
            text, _ = posted_yaml(request)
            actions.update_experiment(
                actor,
                experiment,
                config_yaml=text,
                name=meta["name"],
                project=meta["project"],
                description=meta["description"],
                tags=meta["tags"],
                note=request.POST.get("note", ""),
                check_paths_exist=not _paths_exist_elsewhere(request),
            )
        except ActionError as err:
            return _refused_page(
                request, err, meta=meta, experiment=experiment, fallback_yaml=experiment.config_yaml
            )
        messages.success(request, "saved")
        return redirect(experiment.get_absolute_url())
    form = build_form(experiment.config)
    meta = {
        "name": experiment.name,
        "project": experiment.project,
        "description": experiment.description,
        "tags": ", ".join(t.name for t in experiment.tags.all()),
    }
    return _form_page(
        request, form=form, yaml_text=experiment.config_yaml, meta=meta, experiment=experiment
    )


@require_POST
def form_convert(request: HttpRequest) -> HttpResponse:
    """The page's JS switching tabs: ``to=yaml`` merges the form into YAML, ``to=form`` renders
    the form for the YAML. Nothing is saved."""
    try:
        if request.POST.get("to") == "form":
            data = parse_yaml(request.POST.get("config_yaml", ""))
            if not isinstance(data, dict):
                raise ActionError("the config must be a mapping of sections (mode, model, ...)")
            form = build_form(data)
            html = render_to_string("experiments/_form_sections.html", {"form": form}, request)
            return JsonResponse({"html": html, "base_yaml": form.base_yaml})
        base = parse_yaml(request.POST.get("base_yaml", ""), what="the form's base config")
        merged = merge_form(base if isinstance(base, dict) else {}, request.POST)
        return JsonResponse({"yaml": canonical_yaml(named_after_experiment(merged, request))})
    except ActionError as err:
        return JsonResponse(err.as_json(), status=err.status)


# ---------------------------------------------------------------- one experiment


@require_GET
def experiment_detail(request: HttpRequest, pk: int) -> HttpResponse:
    experiment = authorize(Actor.from_request(request), Experiment, pk, "experiment.view")
    # the run list shows no config snapshot: leave those columns unread
    runs = list(experiment.runs.order_by("-number").defer("config_yaml", "config")[:200])
    return render(
        request,
        "experiments/detail.html",
        {"experiment": experiment, "runs": runs, "tags": experiment.tags.all()},
    )


def _filename(name: str) -> str:
    return (dir_name(name) or "experiment") + ".yaml"


@require_GET
def experiment_yaml(request: HttpRequest, pk: int) -> HttpResponse:
    experiment = authorize(Actor.from_request(request), Experiment, pk, "experiment.view")
    response = HttpResponse(experiment.config_yaml, content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{_filename(experiment.name)}"'
    return response


@require_POST
def experiment_clone(request: HttpRequest, pk: int) -> HttpResponse:
    actor = Actor.from_request(request)
    experiment = authorize(actor, Experiment, pk, "experiment.clone")
    try:
        clone = actions.clone_experiment(actor, experiment, name=request.POST.get("name") or None)
    except ActionError as err:
        return _detail_error(request, experiment, err)
    messages.success(request, f"cloned as {clone.name!r}")
    return redirect(f"/experiments/{clone.pk}/edit/")


@require_POST
def experiment_delete(request: HttpRequest, pk: int) -> HttpResponse:
    actor = Actor.from_request(request)
    experiment = authorize(actor, Experiment, pk, "experiment.delete")
    try:
        actions.delete_experiment(actor, experiment)
    except ActionError as err:
        return _detail_error(request, experiment, err)
    messages.success(request, f"experiment {experiment.name!r} deleted")
    return redirect("/experiments/")


def _detail_error(request: HttpRequest, experiment: Experiment, err: ActionError) -> HttpResponse:
    # the run list shows no config snapshot: leave those columns unread
    runs = list(experiment.runs.order_by("-number").defer("config_yaml", "config")[:200])
    return render(
        request,
        "experiments/detail.html",
        {"experiment": experiment, "runs": runs, "tags": experiment.tags.all(), "error": err},
        status=err.status,
    )


@require_GET
def experiment_versions(request: HttpRequest, pk: int) -> HttpResponse:
    experiment = authorize(Actor.from_request(request), Experiment, pk, "experiment.view")
    versions = list(experiment.versions.select_related("author").order_by("-number"))
    by_number = {v.number: v for v in versions}
    diff = None
    a, b = request.GET.get("a"), request.GET.get("b")
    if a and b:
        try:
            va, vb = by_number[int(a)], by_number[int(b)]
        except (KeyError, ValueError) as err:
            raise Http404(f"no version {a} or {b} of this experiment") from err
        lines = difflib.unified_diff(
            va.config_yaml.splitlines(),
            vb.config_yaml.splitlines(),
            fromfile=f"v{va.number}",
            tofile=f"v{vb.number}",
            lineterm="",
        )
        diff = [(_line_class(line), line) for line in lines]
    return render(
        request,
        "experiments/versions.html",
        {"experiment": experiment, "versions": versions, "diff": diff, "a": a, "b": b},
    )


def _line_class(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "file"
    if line.startswith("@@"):
        return "hunk"
    return {"+": "add", "-": "del"}.get(line[:1], "")
