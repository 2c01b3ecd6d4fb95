"""How the site refuses a request, as a page or as JSON.

A page gets Django's answers: the login page for a signed-out visitor, the 403 / 404 page. A
request that asks for JSON (``Accept: application/json``: the run page's Cancel and Convert
buttons, its live data, the compare page's series) gets the same status with a JSON
``{"detail": ...}`` its script can show, never an HTML page it cannot read: a signed-out fetch
that followed the redirect to the login page got a 200 and looked like a success.

``LoginRequiredMiddleware`` replaces Django's in ``MIDDLEWARE``; ``permission_denied`` and
``page_not_found`` are the URL conf's ``handler403`` / ``handler404``.
"""

from __future__ import annotations

from django.contrib.auth import middleware
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

SIGN_IN_FIRST = "sign in first: this needs a signed-in user"


def wants_json(request: HttpRequest) -> bool:
    """The page's ``fetch`` asks with ``Accept: application/json``: answer JSON, not a page."""
    return "application/json" in request.headers.get("Accept", "")


def detail(message: str, status: int) -> JsonResponse:
    return JsonResponse({"detail": message}, status=status)


class LoginRequiredMiddleware(middleware.LoginRequiredMiddleware):
    """Django's (every view needs a signed-in user unless ``@login_not_required``), with a
    JSON 403 instead of the redirect to the login page for a request that asks for JSON."""

    def handle_no_permission(self, request: HttpRequest, view_func) -> HttpResponse:
        if wants_json(request):
            return detail(SIGN_IN_FIRST, 403)
        return super().handle_no_permission(request, view_func)


def _message(exception: Exception, fallback: str) -> str:
    text = exception.args[0] if exception.args else ""
    return text if isinstance(text, str) and text else fallback  # a Resolver404 holds a dict


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if wants_json(request):
        return detail(_message(exception, "permission denied"), 403)
    return defaults.permission_denied(request, exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if wants_json(request):
        return detail(_message(exception, f"{request.path} does not exist"), 404)
    return defaults.page_not_found(request, exception)
