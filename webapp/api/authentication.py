"""API-token authentication for DRF: ``Authorization: Bearer <key>`` (or ``Token <key>``).

A request without such a header falls through to the next class (session auth, which keeps
DRF's CSRF check). A header with an unknown, revoked or malformed key, or the key of an
inactive user, is refused with 401 — never silently treated as anonymous.
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from webapp.accounts.models import ApiToken

KEYWORDS = ("bearer", "token")


class ApiTokenAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        parts = authentication.get_authorization_header(request).split()
        if not parts or parts[0].decode(errors="replace").lower() not in KEYWORDS:
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(
                "Authorization header: expected 'Bearer <token>' (one token, no spaces)"
            )
        try:
            key = parts[1].decode("ascii")
        except UnicodeDecodeError as err:
            raise exceptions.AuthenticationFailed("the token has characters no key has") from err
        token = ApiToken.find_active(key)
        if token is None:
            raise exceptions.AuthenticationFailed("unknown or revoked API token")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("the token's user is inactive")
        token.touch()
        return token.user, token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="api"'


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI schema describes the token: HTTP bearer."""

    target_class = ApiTokenAuthentication
    name = "apiToken"

    def get_security_definition(self, auto_schema) -> dict:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "an API token from /account/ (`Token <key>` is accepted too)",
        }
