"""A WebSocket client of the real ASGI stack (``webapp.asgi.application``: AuthMiddlewareStack,
channels_redis) as a browser on the site's host meets it: the headers of an anonymous visitor or of a
signed-in user's session, and a connect that answers (accepted, close code)."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from webapp.asgi import application

HOST = [(b"host", b"127.0.0.1"), (b"origin", b"http://127.0.0.1")]


def session_headers(user) -> list[tuple[bytes, bytes]]:
    """The host and origin headers and the session cookie of ``user`` signed in."""
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    return [*HOST, (b"cookie", cookie.encode())]


def connect(path: str, headers) -> tuple[bool, int | None]:
    """Open ``path`` with ``headers`` and close it again: (accepted, the close code of a refusal)."""

    async def scenario():
        communicator = WebsocketCommunicator(application, path, headers=headers)
        connected, code = await communicator.connect(timeout=5)
        if connected:
            await communicator.disconnect()
        return connected, code

    return async_to_sync(scenario)()
