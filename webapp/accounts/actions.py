"""State changes of a user's account: API tokens created and revoked.

Each action checks permission, acts and writes one audit row (``token.create`` /
``token.revoke``); the key itself never reaches the audit trail, only the token's name and
visible prefix.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from webapp.accounts.access import deny
from webapp.accounts.models import ApiToken
from webapp.audit.record import Actor, record
from webapp.errors import ActionError

MAX_ACTIVE_TOKENS = 50
NAME_MAX = ApiToken._meta.get_field("name").max_length


def _audit_view(token: ApiToken) -> dict:
    return {"name": token.name, "prefix": token.prefix, "user": token.user_id}


def create_token(actor: Actor, name: str) -> tuple[ApiToken, str]:
    """A new API token of the actor's own user, and its key (shown to the user once)."""
    user = actor.user
    if user is None or not user.is_authenticated:
        deny(actor, "token.create", target_type="apitoken")
    with transaction.atomic():
        return _create_token(actor, user, name)


def _create_token(actor: Actor, user, name: str) -> tuple[ApiToken, str]:
    name = (name or "").strip()
    if not name:
        raise ActionError("the token needs a name", errors={"name": "this field is required"})
    if len(name) > NAME_MAX:
        raise ActionError(
            "the token name is too long",
            errors={"name": f"at most {NAME_MAX} characters (got {len(name)})"},
        )
    active = ApiToken.objects.active().filter(user=user)
    if active.filter(name=name).exists():
        raise ActionError(
            f"you already have an active token named {name!r}",
            errors={"name": "choose another name, or revoke the old token first"},
            status=409,
        )
    if active.count() >= MAX_ACTIVE_TOKENS:
        raise ActionError(
            f"you have {MAX_ACTIVE_TOKENS} active tokens; revoke one before creating another",
            status=409,
        )
    token, key = ApiToken.issue(user, name)
    record(actor, "token.create", token, after=_audit_view(token))
    return token, key


def revoke_token(actor: Actor, token: ApiToken) -> ApiToken:
    """Revoke a token: its owner may, and staff; anyone else is refused (and audited)."""
    user = actor.user
    # Checked outside the transaction: the permission.denied row must survive the refusal.
    if not actor.is_system and not (
        user is not None and user.is_authenticated and (user.is_staff or user.pk == token.user_id)
    ):
        deny(actor, "token.revoke", token)
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().get(pk=token.pk)
        if token.revoked_at is not None:
            raise ActionError(f"token {token.name!r} is already revoked", status=409)
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        record(
            actor,
            "token.revoke",
            token,
            before=_audit_view(token),
            after={"revoked_at": token.revoked_at.isoformat()},
        )
    return token
