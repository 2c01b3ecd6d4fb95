"""WebSocket /ws/runs/<run pk>/ through the real ASGI stack (AuthMiddlewareStack, channels_redis):
authentication and ownership on connect, the run's group, and the ``?after=`` replay."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from webapp.asgi import application
from webapp.audit.models import AuditEvent
from webapp.events.models import RunEvent
from webapp.experiments.models import Experiment
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db(transaction=True)

HOST = [(b"host", b"127.0.0.1"), (b"origin", b"http://127.0.0.1")]


def _user(name: str, *, staff: bool = False):
    return get_user_model().objects.create_user(name, password=None, is_staff=staff)


def _headers(user) -> list[tuple[bytes, bytes]]:
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    return [*HOST, (b"cookie", cookie.encode())]


@pytest.fixture
def alice():
    return _user("alice")


@pytest.fixture
def run(alice, unique_id):
    experiment = Experiment.objects.create(owner=alice, name="e", config_yaml="", config={})
    return Run.objects.create(experiment=experiment, number=1, key=unique_id, config_yaml="")


def _connect(path: str, headers) -> tuple[bool, int | None]:
    async def scenario():
        communicator = WebsocketCommunicator(application, path, headers=headers)
        connected, code = await communicator.connect(timeout=5)
        if connected:
            await communicator.disconnect()
        return connected, code

    return async_to_sync(scenario)()


def test_it_refuses_an_anonymous_connection(run):
    assert _connect(f"/ws/runs/{run.pk}/", HOST) == (False, 4403)


def test_it_refuses_another_users_run_with_4403_and_an_audit_row(run):
    assert _connect(f"/ws/runs/{run.pk}/", _headers(_user("bob"))) == (False, 4403)
    denied = AuditEvent.objects.get(action="permission.denied")
    assert (denied.actor_name, denied.target_type, denied.target_id) == ("bob", "run", str(run.pk))
    assert denied.after == {"attempted": "run.watch"}


def test_it_answers_an_unknown_run_with_4404(alice):
    assert _connect("/ws/runs/999999/", _headers(alice)) == (False, 4404)
    assert _connect("/ws/runs/not-a-pk/", _headers(alice)) == (False, 4404)


def test_staff_may_watch_any_run(run):
    assert _connect(f"/ws/runs/{run.pk}/", _headers(_user("root", staff=True)))[0] is True


def test_it_delivers_the_runs_group_messages_to_its_owner(run, alice):
    headers = _headers(alice)

    async def scenario():
        communicator = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/", headers=headers)
        connected, _ = await communicator.connect()
        assert connected
        event = {"id": 7, "kind": "metric", "step": 3, "data": {"rollout/accuracy/mean": 0.625}}
        layer = get_channel_layer()
        await layer.group_send(f"run-{run.pk + 1}", {"type": "run.event", "event": {"id": 1}})
        await layer.group_send(f"run-{run.pk}", {"type": "run.event", "event": event})
        received = await communicator.receive_json_from(timeout=5)
        assert await communicator.receive_nothing(timeout=0.2)
        await communicator.disconnect()
        return received

    assert async_to_sync(scenario)() == {
        "id": 7,
        "kind": "metric",
        "step": 3,
        "data": {"rollout/accuracy/mean": 0.625},
    }


def test_it_replays_the_runs_stored_events_after_the_given_id(run, alice):
    headers = _headers(alice)
    now = datetime.now(tz=UTC)

    def event(key: str, i: int) -> RunEvent:
        return RunEvent.objects.create(
            run_key=key,
            stream_id=f"1-{i}",
            kind="metric",
            step=i,
            payload={"x": i / 4},
            emitted_at=now,
        )

    rows = [event(run.key, 0), event("someone-else", 1), event(run.key, 1), event(run.key, 2)]

    async def scenario():
        url = f"/ws/runs/{run.pk}/?after={rows[0].pk}"
        communicator = WebsocketCommunicator(application, url, headers=headers)
        connected, _ = await communicator.connect()
        assert connected
        got = [await communicator.receive_json_from(timeout=5) for _ in range(2)]
        assert await communicator.receive_nothing(timeout=0.2)
        await communicator.disconnect()
        return got

    got = async_to_sync(scenario)()
    assert [(m["run"], m["stream_id"], m["step"], m["data"]) for m in got] == [
        (run.key, "1-1", 1, {"x": 0.25}),
        (run.key, "1-2", 2, {"x": 0.5}),
    ]
