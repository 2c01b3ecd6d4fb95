"""Runs in the admin: read-only, with "cancel" as the one change, done by the action.

Decision: a run's status, config snapshot, submission id, job dir and times are written only
by ``runs.actions`` (launch, cancel, reconcile and the ingestor's observers), which keep them
consistent with the Ray job and audit each change. So every field is read-only here, there is
no add and no delete (a run goes with its experiment), and "Cancel selected runs" calls
``runs.actions.cancel_run`` for each, under the admin user's name.
Metric points and log lines are not in the admin: there are millions; the run page and the
API page through them.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from webapp.audit.admin import ViewOnlyAdmin
from webapp.audit.record import Actor
from webapp.errors import ActionError
from webapp.runs.models import Run


@admin.register(Run)
class RunAdmin(ViewOnlyAdmin):
    list_display = (
        "experiment",
        "number",
        "status",
        "launched_by",
        "created",
        "started_at",
        "finished_at",
        "submission_id",
    )
    list_filter = ("status",)
    search_fields = ("experiment__name", "=submission_id", "=key")
    list_select_related = ("experiment", "launched_by")
    list_per_page = 50
    show_full_result_count = False
    actions = ["cancel_through_action"]
    fields = (
        "experiment",
        "number",
        "key",
        "status",
        "stage",
        "step",
        "total_steps",
        "launched_by",
        "experiment_version",
        "submission_id",
        "celery_task_id",
        "job_dir",
        "created",
        "started_at",
        "finished_at",
        "last_heartbeat",
        "cancel_requested_at",
        "exit_reason",
        "last_error",
        "last_eval_accuracy",
        "best_eval_accuracy",
        "config_yaml_pre",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        # The list shows no config: leave the snapshots (a few KiB a row) in the database.
        return (
            super()
            .get_queryset(request)
            .defer("config_yaml", "config", "experiment__config_yaml", "experiment__config")
        )

    @admin.display(description="config snapshot (YAML)")
    def config_yaml_pre(self, run: Run) -> str:
        return format_html('<pre style="margin:0">{}</pre>', run.config_yaml)

    @admin.action(description="Cancel selected runs")
    def cancel_through_action(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        from webapp.runs.actions import cancel_run

        actor = Actor.from_request(request)
        for run in queryset.select_related("experiment"):
            try:
                cancel_run(actor, run)
            except ActionError as err:
                self.message_user(request, f"{run}: {err}", messages.ERROR)
            else:
                self.message_user(request, f"{run}: cancel requested.", messages.SUCCESS)
