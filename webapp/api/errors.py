"""How the API says no: every error body is ``{"detail": <message>, "errors": {<path>: <message>},
"error_list": [{"path": <path>, "message": <message>}, ...]}`` (every error at once, in order).

``ActionError`` (a user-fixable failure raised by an action) keeps its status and its per-path
messages (YAML paths such as ``buffer.batch_size``); DRF's validation errors become 400 with the
field paths flattened the same way (``tags.0``); Django's 404/403 keep their messages. Anything
else is a bug and still raises (a 500 in the log, never a swallowed error).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from webapp.errors import ActionError, error_list


def flatten_errors(detail: Any, prefix: str = "") -> dict[str, str]:
    """DRF's nested error detail as ``{"a.b.0": "message; message"}``."""
    if isinstance(detail, dict):
        out: dict[str, str] = {}
        for key, value in detail.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            out.update(flatten_errors(value, path))
        return out
    if isinstance(detail, list):
        if all(not isinstance(item, (dict, list)) for item in detail):
            return {prefix or "non_field_errors": "; ".join(str(item) for item in detail)}
        out = {}
        for index, item in enumerate(detail):
            out.update(flatten_errors(item, f"{prefix}.{index}" if prefix else str(index)))
        return out
    return {prefix or "non_field_errors": str(detail)}


def api_exception_handler(exc: Exception, context: dict) -> Response | None:
    if isinstance(exc, ActionError):
        set_rollback()
        return Response(exc.as_json(), status=exc.status)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or None)
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        errors = flatten_errors(exc.detail)
        response.data = {
            "detail": _summary(errors),
            "errors": errors,
            "error_list": error_list(errors),
        }
    elif isinstance(response.data, dict) and "detail" in response.data:
        response.data = {"detail": str(response.data["detail"]), "errors": {}, "error_list": []}
    return response


def _summary(errors: dict[str, str]) -> str:
    if len(errors) == 1:
        ((path, message),) = errors.items()
        return message if path == "non_field_errors" else f"{path}: {message}"
    return f"the request has {len(errors)} invalid fields"
