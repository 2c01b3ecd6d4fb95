"""WebSocket ``/ws/runs/`` (the list feed) through the real ASGI stack (AuthMiddlewareStack,
channels_redis at 127.0.0.1:6379): anonymous refused, a user receives the run states published
for their own runs only, staff receive every run's."""

from __future__ import annotations

import pytest
from api_helpers import make_user
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from websocket_session import HOST, session_headers

from webapp.asgi import application
from webapp.experiments.models import Experiment
from webapp.runs.list_consumer import STAFF_GROUP, user_group
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db(transaction=True)


def _run(owner, name: str) -> Run:
    experiment = Experiment.objects.create(owner=owner, name=name, config_yaml="", config={})
    return Run.objects.create(experiment=experiment, number=1, config_yaml="")


def _state(run: Run, status: str) -> dict:
    return {"id": run.pk, "number": run.number, "experiment_id": run.experiment_id,
            "status": status, "url": run.get_absolute_url()}  # fmt: skip


def _publish(run: Run, status: str) -> None:
    """What ``webapp.runs.live.publish_run`` sends (the protocol of issue 10)."""
    message = {"type": "run", "run": _state(run, status)}
    layer = get_channel_layer()
    async_to_sync(layer.group_send)(user_group(run.experiment.owner_id), message)
    async_to_sync(layer.group_send)(STAFF_GROUP, message)


def test_it_refuses_an_anonymous_connection_with_4403():
    async def scenario():
        communicator = WebsocketCommunicator(application, "/ws/runs/", headers=HOST)
        return await communicator.connect(timeout=5)

    assert async_to_sync(scenario)() == (False, 4403)


def test_the_owner_and_staff_receive_a_runs_state_and_another_user_does_not():
    alice, bob, root = make_user("alice"), make_user("bob"), make_user("root", staff=True)
    alices, bobs = _run(alice, "a"), _run(bob, "b")
    headers = {
        name: session_headers(u) for name, u in (("alice", alice), ("bob", bob), ("root", root))
    }

    async def scenario():
        sockets = {}
        for name, h in headers.items():
            sockets[name] = WebsocketCommunicator(application, "/ws/runs/", headers=h)
            connected, _ = await sockets[name].connect(timeout=5)
            assert connected, name
        layer = get_channel_layer()
        for run, status in ((alices, "running"), (bobs, "failed")):
            message = {"type": "run", "run": _state(run, status)}
            await layer.group_send(user_group(run.experiment.owner_id), message)
            await layer.group_send(STAFF_GROUP, message)
        got = {"alice": [await sockets["alice"].receive_json_from(timeout=5)]}
        got["bob"] = [await sockets["bob"].receive_json_from(timeout=5)]
        got["root"] = [await sockets["root"].receive_json_from(timeout=5) for _ in range(2)]
        for name, socket in sockets.items():
            assert await socket.receive_nothing(timeout=0.3), f"{name} got more"
            await socket.disconnect()
        return got

    got = async_to_sync(scenario)()
    assert got["alice"] == [{"type": "run", "run": _state(alices, "running")}]
    assert got["bob"] == [{"type": "run", "run": _state(bobs, "failed")}]
    assert sorted(m["run"]["id"] for m in got["root"]) == sorted([alices.pk, bobs.pk])


def test_a_status_change_through_the_runs_actions_reaches_the_owner_only():
    """End to end with the real publisher: ``observe_status`` -> ``publish_run`` -> the feed."""
    from webapp.runs import actions

    alice, bob = make_user("alice"), make_user("bob")
    run = _run(alice, "a")
    Run.objects.filter(pk=run.pk).update(status="starting")  # its Ray job was submitted

    async def scenario():
        mine = WebsocketCommunicator(application, "/ws/runs/", headers=_headers_async[0])
        theirs = WebsocketCommunicator(application, "/ws/runs/", headers=_headers_async[1])
        assert (await mine.connect(timeout=5))[0] and (await theirs.connect(timeout=5))[0]
        from channels.db import database_sync_to_async

        await database_sync_to_async(_observe)(run)
        received = await mine.receive_json_from(timeout=5)
        assert await theirs.receive_nothing(timeout=0.3)
        await mine.disconnect()
        await theirs.disconnect()
        return received

    def _observe(run: Run) -> None:
        actions.observe_status(Run.objects.get(pk=run.pk), "running", "", 1_700_000_000.0)

    _headers_async = (session_headers(alice), session_headers(bob))
    received = async_to_sync(scenario)()
    assert received["type"] == "run"
    assert received["run"]["id"] == run.pk and received["run"]["status"] == "running"
    assert received["run"]["experiment_id"] == run.experiment_id
