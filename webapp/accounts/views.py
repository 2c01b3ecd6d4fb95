"""The landing page (``/`` goes to the experiment list) and the account page ``/account/``,
where a user lists, creates and revokes their API tokens. Login/logout are Django's own auth
views (see webapp/urls.py).

A new token's key is shown once: the create view puts it in the session and redirects, and the
account page pops it, so a reload (or the back button) never shows it again.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from webapp.accounts.actions import create_token, revoke_token
from webapp.accounts.models import ApiToken
from webapp.audit.record import Actor
from webapp.errors import ActionError

NEW_KEY_SESSION = "accounts.new_token_key"


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    return redirect("/experiments/")


@require_GET
def account(request: HttpRequest) -> HttpResponse:
    return _account_page(request)


def _account_page(request: HttpRequest, errors: dict | None = None, status: int = 200):
    new_key = request.session.pop(NEW_KEY_SESSION, None)
    tokens = ApiToken.objects.filter(user=request.user)
    context = {
        "tokens": tokens,
        "new_key": new_key,
        "errors": errors or {},
        "api_url": request.build_absolute_uri("/api/v1/"),
    }
    response = render(request, "accounts/account.html", context, status=status)
    response["Cache-Control"] = "no-store"  # the page may carry a new key
    return response


@require_POST
def token_create(request: HttpRequest) -> HttpResponse:
    try:
        token, key = create_token(Actor.from_request(request), request.POST.get("name", ""))
    except ActionError as err:
        messages.error(request, err.message)
        return _account_page(request, errors=err.errors, status=err.status)
    request.session[NEW_KEY_SESSION] = key
    messages.success(request, f"Token {token.name!r} created. Copy its key now: it is shown once.")
    return redirect("accounts:account")


@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=token_id)  # another user's: 403 (and audited) below
    try:
        revoke_token(Actor.from_request(request), token)
    except ActionError as err:
        messages.error(request, err.message)
    else:
        messages.success(request, f"Token {token.name!r} revoked.")
    return redirect("accounts:account")
