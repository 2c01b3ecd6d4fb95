"""Checkpoints in the admin: read-only rows; "convert to Hugging Face" goes through the action.

Decision: rows come from the run's checkpoint events and job dir, and the HF status from the
conversion task (``checkpoints.actions``), so every field is read-only, with no add and no
delete (a checkpoint row goes with its run; its files are not the admin's to remove).
"Convert selected to Hugging Face" calls ``checkpoints.actions.convert_checkpoint`` for each,
which checks access, audits ``checkpoint.convert`` and enqueues the task.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.defaultfilters import filesizeformat

from webapp.audit.admin import ViewOnlyAdmin
from webapp.audit.record import Actor
from webapp.checkpoints.models import Checkpoint
from webapp.errors import ActionError


@admin.register(Checkpoint)
class CheckpointAdmin(ViewOnlyAdmin):
    list_display = ("run", "stage", "step", "hf_status", "size")
    list_filter = ("hf_status",)
    search_fields = ("run__experiment__name", "=run__key")
    list_select_related = ("run__experiment",)
    list_per_page = 100
    actions = ["convert_through_action"]
    fields = (
        "run",
        "stage",
        "step",
        "path",
        "size",
        "hf_status",
        "hf_progress",
        "hf_path",
        "hf_error",
        "created",
        "updated",
    )
    readonly_fields = fields

    @admin.display(description="size", ordering="size_bytes")
    def size(self, checkpoint: Checkpoint) -> str:
        return "-" if checkpoint.size_bytes is None else filesizeformat(checkpoint.size_bytes)

    @admin.action(description="Convert selected to Hugging Face")
    def convert_through_action(self, request: HttpRequest, queryset: QuerySet[Checkpoint]) -> None:
        from webapp.checkpoints.actions import convert_checkpoint

        actor = Actor.from_request(request)
        for checkpoint in queryset.select_related("run__experiment"):
            try:
                convert_checkpoint(actor, checkpoint)
            except ActionError as err:
                self.message_user(request, f"{checkpoint}: {err}", messages.ERROR)
            else:
                self.message_user(request, f"{checkpoint}: conversion queued.", messages.SUCCESS)
