"""The audit trail in the admin: read-only for everyone, superusers included.

No add, no change, no delete and no bulk action; the change page shows every field with the
before/after JSON pretty-printed. The model refuses changes too (``AuditImmutable``), so this
is the second of two locks: the admin never offers what the model would refuse.
"""

from __future__ import annotations

import json

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html

from webapp.audit.models import AuditEvent


def _pretty_json(value) -> str:
    if value is None:
        return "-"
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre style="margin:0;white-space:pre-wrap">{}</pre>', text)


class ViewOnlyAdmin(admin.ModelAdmin):
    """An admin that shows rows and never writes them: no add, no change, no delete. For the
    rows only actions write (the audit trail here; runs and checkpoints, whose admins offer
    their actions instead)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(ViewOnlyAdmin):
    list_display = ("created", "actor_name", "action", "target_type", "target_id", "ip")
    list_filter = ("action", "target_type", ("created", admin.DateFieldListFilter))
    search_fields = ("actor_name", "=target_id")
    list_per_page = 50  # rendering the rows is most of the page's time
    # No date_hierarchy: its SELECT DISTINCT of every row's day grows with the trail (66 ms at
    # 10k rows on SQLite); the date filter needs no query. No full COUNT(*) beside a search.
    show_full_result_count = False
    actions = None  # no "delete selected"
    fields = (
        "created",
        "actor_id",
        "actor_name",
        "action",
        "target_type",
        "target_id",
        "before_json",
        "after_json",
        "ip",
        "user_agent",
    )
    readonly_fields = fields

    @admin.display(description="before")
    def before_json(self, event: AuditEvent) -> str:
        return _pretty_json(event.before)

    @admin.display(description="after")
    def after_json(self, event: AuditEvent) -> str:
        return _pretty_json(event.after)
