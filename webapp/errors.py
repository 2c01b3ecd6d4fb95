"""Errors an action raises for something the user can fix; views and the API turn them into a
4xx with the message (beside the field when ``errors`` names YAML paths / form fields).

    raise ActionError("Ray's job server at http://127.0.0.1:8265 does not answer", status=409)
    raise ActionError("the config has errors", errors={"buffer.batch_size": "must be >= 1"})
"""

from __future__ import annotations


class ActionError(Exception):
    status = 400

    def __init__(
        self, message: str, *, errors: dict[str, str] | None = None, status: int | None = None
    ):
        super().__init__(message)
        self.message = message
        self.errors = dict(errors or {})  # YAML path (or form field) -> message
        if status is not None:
            self.status = status

    def as_json(self) -> dict:
        return {
            "detail": self.message,
            "errors": self.errors,
            "error_list": error_list(self.errors),
        }


def error_list(errors: dict[str, str]) -> list[dict[str, str]]:
    """``errors`` as the API's list, one ``{path, message}`` per error in the order found."""
    return [{"path": path, "message": message} for path, message in errors.items()]
