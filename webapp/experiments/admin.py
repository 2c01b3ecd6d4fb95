"""Experiments in the admin: browse everything; the few edits it allows go through the actions.

Decision: the admin never writes an Experiment directly, because each change must be checked
and audited the same way whichever door it comes through.

- Config, version, owner, last run and times are read-only here: a config is changed on the
  experiment's edit page (or the API), where it is validated against the untrusted-input rules
  and becomes a new version.
- Name, project, description and tags are editable; the save calls
  ``experiments.actions.update_experiment`` (one ``experiment.update`` audit row, the same
  checks as the edit page), and a refusal is shown at the top of the form with nothing saved.
- Delete (one or selected) calls ``experiments.actions.delete_experiment`` per experiment, so a
  running experiment is refused (409) and each deletion is audited.
- No "add": an experiment is created from /experiments/new/ or the API, which validate its config.
The versions are shown inline, read-only (their diff is at /experiments/<id>/versions/).
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.html import format_html

from webapp.audit.record import Actor
from webapp.errors import ActionError
from webapp.experiments.models import Experiment, ExperimentVersion, Tag

_REFUSED = "_rft_admin_refused"


class ExperimentVersionInline(admin.TabularInline):
    model = ExperimentVersion
    fields = ("number", "note", "author", "created")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False
    ordering = ("-number",)

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(Experiment)
class ExperimentAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "owner",
        "project",
        "tag_list",
        "version",
        "last_run_status",
        "updated",
    )
    list_filter = ("project", "owner", "tags")
    search_fields = ("name", "project", "description")
    list_select_related = ("owner", "last_run")
    list_per_page = 50
    fields = (
        "name",
        "project",
        "description",
        "tags",
        "owner",
        "version",
        "last_run",
        "config_yaml_pre",
        "created",
        "updated",
    )
    readonly_fields = (
        "owner",
        "version",
        "last_run",
        "config_yaml_pre",
        "created",
        "updated",
    )
    filter_horizontal = ("tags",)
    inlines = [ExperimentVersionInline]
    actions = ["delete_through_action"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Experiment]:
        # The list shows no config: leave it (a few KiB a row, twice with the last run) unread.
        return (
            super()
            .get_queryset(request)
            .prefetch_related("tags")
            .defer("config_yaml", "config", "last_run__config_yaml", "last_run__config")
        )

    @admin.display(description="tags")
    def tag_list(self, experiment: Experiment) -> str:
        return ", ".join(tag.name for tag in experiment.tags.all())

    @admin.display(description="last run", ordering="last_run__status")
    def last_run_status(self, experiment: Experiment) -> str:
        run = experiment.last_run
        return f"#{run.number} {run.status}" if run is not None else "-"

    @admin.display(description="config (YAML)")
    def config_yaml_pre(self, experiment: Experiment) -> str:
        return format_html('<pre style="margin:0">{}</pre>', experiment.config_yaml)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_actions(self, request: HttpRequest) -> dict:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # it would delete without the action's checks
        return actions

    def save_model(self, request: HttpRequest, obj: Experiment, form, change: bool) -> None:
        from webapp.experiments.actions import update_experiment

        current = Experiment.objects.get(pk=obj.pk)  # obj already carries the form's values
        data = form.cleaned_data
        try:
            update_experiment(
                Actor.from_request(request),
                current,
                name=data["name"],
                project=data["project"],
                description=data["description"],
                tags=[tag.name for tag in data["tags"]],
                note="edited in the admin",
            )
        except ActionError as err:
            setattr(request, _REFUSED, True)
            self.message_user(request, f"Not saved: {err}", messages.ERROR)

    def save_related(self, request: HttpRequest, form, formsets, change: bool) -> None:
        """Tags were saved by update_experiment (no ``form.save_m2m()``); the versions inline
        is view-only, so saving its formset writes nothing."""
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)

    def response_change(self, request: HttpRequest, obj: Experiment) -> HttpResponse:
        if getattr(request, _REFUSED, False):
            return HttpResponseRedirect(request.path)
        return super().response_change(request, obj)

    def log_change(self, request, obj, message):
        if not getattr(request, _REFUSED, False):
            super().log_change(request, obj, message)

    def delete_model(self, request: HttpRequest, obj: Experiment) -> None:
        from webapp.experiments.actions import delete_experiment

        delete_experiment(Actor.from_request(request), obj)

    def get_deleted_objects(self, objs, request: HttpRequest):
        """The runs and checkpoints go with their experiment: delete_experiment decides (their
        own admins refuse a delete of one run, which would otherwise block this page)."""
        deleted, counts, _perms_needed, protected = super().get_deleted_objects(objs, request)
        return deleted, counts, set(), protected

    def delete_view(self, request: HttpRequest, object_id: str, extra_context=None):
        try:
            return super().delete_view(request, object_id, extra_context)
        except ActionError as err:
            self.message_user(request, f"Not deleted: {err}", messages.ERROR)
            return HttpResponseRedirect(request.path.rsplit("delete/", 1)[0])

    @admin.action(
        description="Delete selected experiments (refused while a run is active)",
        permissions=["delete"],
    )
    def delete_through_action(self, request: HttpRequest, queryset: QuerySet[Experiment]) -> None:
        from webapp.experiments.actions import delete_experiment

        actor = Actor.from_request(request)
        deleted, refused = 0, []
        for experiment in queryset:
            try:
                delete_experiment(actor, experiment)
                deleted += 1
            except ActionError as err:
                refused.append(f"{experiment.name}: {err}")
        if deleted:
            self.message_user(request, f"Deleted {deleted} experiment(s).", messages.SUCCESS)
        for line in refused:
            self.message_user(request, f"Not deleted: {line}", messages.ERROR)


@admin.register(Tag)
class TagAdmin(admin.ModelAdmin):
    list_display = ("name",)
    search_fields = ("name",)
