"""API tokens in the admin: listed (whose, name, visible prefix, used, revoked), never shown in
full (only the hash is stored) and never edited; "Revoke selected" goes through
``revoke_token``, so each revocation is audited as the admin user."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from webapp.accounts.models import ApiToken
from webapp.audit.admin import ViewOnlyAdmin
from webapp.audit.record import Actor
from webapp.errors import ActionError


@admin.register(ApiToken)
class ApiTokenAdmin(ViewOnlyAdmin):
    list_display = ("name", "user", "prefix", "created", "last_used", "revoked_at")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    search_fields = ("name", "prefix", "user__username")
    list_select_related = ("user",)
    exclude = ("key_hash",)
    actions = ["revoke_through_action"]

    @admin.action(description="Revoke selected tokens")
    def revoke_through_action(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        from webapp.accounts.actions import revoke_token

        actor = Actor.from_request(request)
        for token in queryset.select_related("user"):
            try:
                revoke_token(actor, token)
            except ActionError as err:
                self.message_user(request, f"{token.name}: {err}", messages.ERROR)
            else:
                self.message_user(request, f"{token.name}: revoked.", messages.SUCCESS)
