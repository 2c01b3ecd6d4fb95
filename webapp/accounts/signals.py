"""Audit rows for signing in and out, from Django's auth signals (connected in apps.py).

``auth.login`` and ``auth.logout`` name the user as actor and target; ``auth.login_failed``
is written by the anonymous actor with the username that was tried (never the password: Django
hands the signal cleansed credentials, and only the username is read from them). Each row
carries the request's IP and user agent.
"""

from __future__ import annotations

import dataclasses

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.dispatch import receiver

from webapp.audit.record import Actor, record

USERNAME_MAX = 150


def _actor(request, user=None) -> Actor:
    actor = Actor.from_request(request) if request is not None else Actor()
    return dataclasses.replace(actor, user=user) if user is not None else actor


@receiver(user_logged_in, dispatch_uid="rft-audit-login")
def audit_login(sender, request, user, **kwargs) -> None:
    record(_actor(request, user), "auth.login", user)


@receiver(user_logged_out, dispatch_uid="rft-audit-logout")
def audit_logout(sender, request, user, **kwargs) -> None:
    if user is None:  # a logout without a session: nobody to name
        return
    record(_actor(request, user), "auth.logout", user)


@receiver(user_login_failed, dispatch_uid="rft-audit-login-failed")
def audit_login_failed(sender, credentials: dict, request=None, **kwargs) -> None:
    User = get_user_model()
    username = str(credentials.get(User.USERNAME_FIELD, credentials.get("username", "")))
    username = username[:USERNAME_MAX]
    known = User._default_manager.filter(**{User.USERNAME_FIELD: username}).first()
    record(
        _actor(request),
        "auth.login_failed",
        known,
        target_type="user",
        after={"username": username},
    )
