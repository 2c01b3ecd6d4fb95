"""``record()``: the one way an audit row is written, and ``Actor``, who an action is done by.

Every action function takes an ``Actor`` (a signed-in user with the request's IP and user agent,
or ``Actor.system()`` for Celery tasks, the ingestor and reconcile) and calls ``record`` once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import models

from webapp.audit.models import AuditEvent


@dataclass(frozen=True)
class Actor:
    user: Any = None  # a User, or None for the system
    ip: str | None = None
    user_agent: str = ""
    is_system: bool = False  # a worker, the ingestor, reconcile: acts on every run

    @classmethod
    def from_request(cls, request) -> Actor:
        meta = getattr(request, "META", {})
        forwarded = meta.get("HTTP_X_FORWARDED_FOR", "")
        ip = forwarded.split(",")[0].strip() if forwarded else meta.get("REMOTE_ADDR")
        user = getattr(request, "user", None)
        return cls(
            user=user if user is not None and user.is_authenticated else None,
            ip=ip or None,
            user_agent=meta.get("HTTP_USER_AGENT", "")[:400],
        )

    @classmethod
    def from_scope(cls, scope: dict) -> Actor:
        """A Channels connection's actor (WebSocket connects)."""
        headers = dict(scope.get("headers") or [])
        client = scope.get("client") or (None, None)
        user = scope.get("user")
        return cls(
            user=user if user is not None and user.is_authenticated else None,
            ip=client[0],
            user_agent=headers.get(b"user-agent", b"").decode(errors="replace")[:400],
        )

    @classmethod
    def system(cls) -> Actor:
        return cls(is_system=True)

    @property
    def name(self) -> str:
        if self.user is not None:
            return self.user.get_username()
        return "system" if self.is_system else "anonymous"


def record(
    actor: Actor,
    action: str,
    target: models.Model | None = None,
    *,
    target_type: str = "",
    target_id: str | int = "",
    before: Any = None,
    after: Any = None,
) -> AuditEvent:
    """Append one audit row. ``target`` (a model instance) sets the target type and id."""
    if target is not None:
        target_type = target_type or target._meta.model_name
        target_id = target_id or target.pk
    user = actor.user
    return AuditEvent.objects.create(
        actor_id=user.pk if user is not None else None,
        actor_name=actor.name,
        action=action,
        target_type=target_type,
        target_id="" if target_id in ("", None) else str(target_id),
        before=before,
        after=after,
        ip=actor.ip,
        user_agent=actor.user_agent,
    )
