"""API tokens: a user's keys for the JSON API (``Authorization: Bearer <key>``).

A key is shown once, when it is created; the database keeps only its sha256 hash and a short
visible prefix (so the account page can say which key is which). A user has several, each
with a name; a revoked token stays listed (with when it was revoked) and authenticates nothing.
"""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

KEY_PREFIX = "rft_"
VISIBLE_CHARS = 12  # "rft_" + 8 random characters: enough to tell a user's keys apart


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiTokenQuerySet(models.QuerySet):
    def active(self) -> ApiTokenQuerySet:
        return self.filter(revoked_at__isnull=True)


class ApiToken(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=VISIBLE_CHARS, help_text="first characters of the key")
    key_hash = models.CharField(max_length=64, unique=True, help_text="sha256 of the key")
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["user", "-created"], name="apitoken_user_created")]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    @classmethod
    def issue(cls, user, name: str) -> tuple[ApiToken, str]:
        """A new token of ``user`` and its key (the only time the key exists in clear)."""
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(
            user=user, name=name, prefix=key[:VISIBLE_CHARS], key_hash=hash_key(key)
        )
        return token, key

    @classmethod
    def find_active(cls, key: str) -> ApiToken | None:
        """The unrevoked token of this key, with its user, or None."""
        return cls.objects.active().select_related("user").filter(key_hash=hash_key(key)).first()

    def touch(self, every_s: float = 60.0) -> None:
        """Note a use; at most one write per ``every_s`` so busy clients do not write per call."""
        now = timezone.now()
        if self.last_used is None or (now - self.last_used).total_seconds() >= every_s:
            ApiToken.objects.filter(pk=self.pk).update(last_used=now)
            self.last_used = now
