from django.contrib import admin

from webapp.events.models import RunEvent


@admin.register(RunEvent)
class RunEventAdmin(admin.ModelAdmin):
    list_display = ("run_key", "stream_id", "kind", "role", "step", "emitted_at")
    list_filter = ("kind", "role")
    search_fields = ("run_key",)
