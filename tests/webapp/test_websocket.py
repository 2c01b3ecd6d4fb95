"""WebSocket /ws/runs/<id>/ through the real ASGI stack (AuthMiddlewareStack, channels_redis)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth import get_user_model

from webapp.asgi import application
from webapp.events.models import RunEvent

pytestmark = pytest.mark.django_db(transaction=True)

HOST = [(b"host", b"127.0.0.1"), (b"origin", b"http://127.0.0.1")]


def _session_headers(client) -> list[tuple[bytes, bytes]]:
    user = get_user_model().objects.create_user("bob", password="x-very-long-pass")
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    return [*HOST, (b"cookie", cookie.encode())]


def test_it_refuses_an_anonymous_connection(unique_id):
    async def scenario():
        communicator = WebsocketCommunicator(application, f"/ws/runs/{unique_id}/", headers=HOST)
        connected, code = await communicator.connect()
        return connected, code

    connected, code = async_to_sync(scenario)()
    assert connected is False
    assert code == 4403


def test_it_delivers_group_messages_to_a_signed_in_user(client, unique_id):
    headers = _session_headers(client)

    async def scenario():
        communicator = WebsocketCommunicator(application, f"/ws/runs/{unique_id}/", headers=headers)
        connected, _ = await communicator.connect()
        assert connected
        event = {"id": 7, "kind": "metric", "step": 3, "data": {"rollout/accuracy/mean": 0.625}}
        await get_channel_layer().group_send(
            f"run-{unique_id}", {"type": "run.event", "event": event}
        )
        received = await communicator.receive_json_from(timeout=5)
        await communicator.disconnect()
        return received

    received = async_to_sync(scenario)()
    assert received == {
        "id": 7,
        "kind": "metric",
        "step": 3,
        "data": {"rollout/accuracy/mean": 0.625},
    }


def test_it_replays_stored_events_after_the_given_id(client, unique_id):
    headers = _session_headers(client)
    now = datetime.now(tz=UTC)
    rows = [
        RunEvent.objects.create(
            run_key=unique_id,
            stream_id=f"1-{i}",
            kind="metric",
            step=i,
            payload={"x": i / 4},
            emitted_at=now,
        )
        for i in range(3)
    ]

    async def scenario():
        url = f"/ws/runs/{unique_id}/?after={rows[0].pk}"
        communicator = WebsocketCommunicator(application, url, headers=headers)
        connected, _ = await communicator.connect()
        assert connected
        got = [await communicator.receive_json_from(timeout=5) for _ in range(2)]
        assert await communicator.receive_nothing(timeout=0.2)
        await communicator.disconnect()
        return got

    got = async_to_sync(scenario)()
    assert [(m["stream_id"], m["step"], m["data"]) for m in got] == [
        ("1-1", 1, {"x": 0.25}),
        ("1-2", 2, {"x": 0.5}),
    ]
