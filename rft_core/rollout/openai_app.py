"""The HTTP routes of the OpenAI-compatible endpoint (``rft_core.rollout.openai_server`` owns
the endpoint: its key, the engine calls and the recorded turns): the key check on every
request, ``/v1/models``, ``/v1/chat/completions`` and their ``/sessions/<session>/v1/...``
twins, and OpenAI-shaped error bodies (401 bad key, 400 bad request or a prompt longer than
the engine's ``max_model_len``, 500 engine failure).

No ``from __future__ import annotations`` here: FastAPI reads the handlers' annotations as
objects.
"""

import logging
import secrets
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from rft_core.errors import DataError
from rft_core.rollout.openai_format import RequestError

log = logging.getLogger("rft_core.rollout.openai_server")

DEFAULT_SESSION = "default"


def error(status: int, message: str, kind: str, code: Any = None) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=status)


def build_app(endpoint: Any) -> FastAPI:
    """The FastAPI app serving ``endpoint`` (an ``OpenAIEndpoint``)."""
    app = FastAPI(
        title="RFT Studio rollout endpoint", docs_url=None, redoc_url=None, openapi_url=None
    )
    key = endpoint.api_key.encode()

    @app.middleware("http")
    async def check_key(request: Request, call_next: Any) -> Any:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip().encode(), key):
            return error(
                401,
                "Incorrect API key provided: this endpoint takes the run's key",
                "invalid_request_error",
                "invalid_api_key",
            )
        return await call_next(request)

    def models() -> dict:
        entry = {"id": endpoint.model_name, "object": "model", "created": 0, "owned_by": "rft"}
        return {"object": "list", "data": [entry]}

    async def chat(request: Request, session: str = DEFAULT_SESSION) -> Any:
        try:
            body = await request.json()
        except ValueError:
            return error(400, "the request body is not JSON", "invalid_request_error")
        if not isinstance(body, dict):
            return error(400, "the request body must be a JSON object", "invalid_request_error")
        try:
            return await endpoint.complete(body, session)
        except RequestError as err:
            return error(400, str(err), "invalid_request_error")
        except DataError as err:  # the prompt does not fit the engine (max_model_len)
            return error(400, str(err), "invalid_request_error", "context_length_exceeded")
        except Exception as err:  # noqa: BLE001 - the engine's failure, to the caller
            log.exception("OpenAI endpoint: generation failed")
            return error(500, f"generation failed: {err}", "server_error")

    app.get("/v1/models")(models)
    app.get("/sessions/{session}/v1/models")(models)
    app.post("/v1/chat/completions")(chat)
    app.post("/sessions/{session}/v1/chat/completions")(chat)
    return app
