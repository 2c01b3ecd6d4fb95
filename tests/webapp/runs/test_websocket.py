"""WebSocket /ws/runs/<run pk>/ through the real ASGI stack (AuthMiddlewareStack, channels_redis):
authentication and ownership on connect, the run's group (events batches, run and checkpoint
states) and the ``?after=`` replay; the channel layer is the real Redis."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from api_helpers import make_user
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from websocket_session import HOST, connect, session_headers

from webapp.asgi import application
from webapp.audit.models import AuditEvent
from webapp.events.models import RunEvent
from webapp.experiments.models import Experiment
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run(alice, unique_id):
    experiment = Experiment.objects.create(owner=alice, name="e", config_yaml="", config={})
    return Run.objects.create(experiment=experiment, number=1, key=unique_id, config_yaml="")


def test_it_refuses_an_anonymous_connection(run):
    assert connect(f"/ws/runs/{run.pk}/", HOST) == (False, 4403)


def test_it_refuses_another_users_run_with_4403_and_an_audit_row(run):
    assert connect(f"/ws/runs/{run.pk}/", session_headers(make_user("bob"))) == (False, 4403)
    denied = AuditEvent.objects.get(action="permission.denied")
    assert (denied.actor_name, denied.target_type, denied.target_id) == ("bob", "run", str(run.pk))
    assert denied.after == {"attempted": "run.watch"}


def test_it_answers_an_unknown_run_with_4404(alice):
    assert connect("/ws/runs/999999/", session_headers(alice)) == (False, 4404)
    assert connect("/ws/runs/not-a-pk/", session_headers(alice)) == (False, 4404)


def test_staff_may_watch_any_run(run):
    assert connect(f"/ws/runs/{run.pk}/", session_headers(make_user("root", staff=True)))[0] is True


def test_it_forwards_the_runs_group_messages_to_its_owner(run, alice):
    headers = session_headers(alice)
    batch = {"type": "events", "first_seq": 3, "last_seq": 3, "events": [{"seq": 3}]}

    async def scenario():
        communicator = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/", headers=headers)
        connected, _ = await communicator.connect()
        assert connected
        layer = get_channel_layer()
        other = {"type": "live.message", "message": {"type": "run", "run": {"id": 0}}}
        await layer.group_send(f"run-{run.pk + 1}", other)
        await layer.group_send(f"run-{run.pk}", {"type": "live.message", "message": batch})
        received = await communicator.receive_json_from(timeout=5)
        assert await communicator.receive_nothing(timeout=0.2)
        await communicator.disconnect()
        return received

    assert async_to_sync(scenario)() == batch


def _event(key: str, seq: int, at: datetime) -> RunEvent:
    return RunEvent.objects.create(
        run_key=key,
        stream_id=f"1-{seq}",
        seq=seq,
        kind="metric",
        step=seq,
        payload={"x": seq / 4},
        emitted_at=at,
    )


def test_it_replays_the_events_after_the_given_seq_as_one_batch(run, alice):
    headers = session_headers(alice)
    now = datetime.now(tz=UTC)
    for seq in (1, 2, 3):
        _event(run.key, seq, now)
    _event("someone-else", 4, now)

    async def scenario():
        url = f"/ws/runs/{run.pk}/?after=1"
        communicator = WebsocketCommunicator(application, url, headers=headers)
        connected, _ = await communicator.connect()
        assert connected
        got = await communicator.receive_json_from(timeout=5)
        assert await communicator.receive_nothing(timeout=0.2)
        await communicator.disconnect()
        return got

    got = async_to_sync(scenario)()
    assert (got["type"], got["first_seq"], got["last_seq"]) == ("events", 2, 3)
    assert [(e["seq"], e["step"], e["data"]) for e in got["events"]] == [
        (2, 2, {"x": 0.5}),
        (3, 3, {"x": 0.75}),
    ]


def test_a_client_up_to_date_gets_no_replay(run, alice):
    _event(run.key, 1, datetime.now(tz=UTC))
    headers = session_headers(alice)

    async def scenario():
        url = f"/ws/runs/{run.pk}/?after=1"
        communicator = WebsocketCommunicator(application, url, headers=headers)
        connected, _ = await communicator.connect()
        assert connected
        nothing = await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()
        return nothing

    assert async_to_sync(scenario)() is True


def test_the_ingestors_batches_and_the_run_and_checkpoint_states_reach_the_socket(
    run, alice, tmp_path, monkeypatch, redis_url, redis_client
):
    """The real monitor writes the stream, the real ingestor stores it and publishes through
    channels_redis, the consumer forwards: run states, then one events batch; then a checkpoint
    state from publish_checkpoint."""
    import redis

    from rft_core.monitor import ENV_REDIS_URL, ENV_RUN_ID, build_monitor, runs_set, stream_key
    from webapp.checkpoints.actions import publish_checkpoint
    from webapp.checkpoints.models import Checkpoint
    from webapp.runs.models import RunStatus
    from workers.ingestor import Ingestor

    Run.objects.filter(pk=run.pk).update(status=RunStatus.STARTING)
    redis_client.test_keys.append(stream_key(run.key))
    monkeypatch.setenv(ENV_REDIS_URL, redis_url)
    monkeypatch.setenv(ENV_RUN_ID, run.key)
    monkeypatch.setenv("RFT_HEARTBEAT_S", "3600")
    with build_monitor("none", {}, tmp_path, role="explorer", run_name="d", stage="rft") as m:
        m.log({"rollout/reward/mean": 0.5}, step=1)
        m.log_line("step 1 done")
    ingestor = Ingestor(
        redis.Redis.from_url(redis_url), "c", group=f"g-{run.key}", only_runs={run.key}
    )
    checkpoint = Checkpoint.objects.create(run=run, stage="rft", step=1, path="/x")
    headers = session_headers(alice)

    async def scenario():
        communicator = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/", headers=headers)
        connected, _ = await communicator.connect()
        assert connected
        await database_sync_to_async(ingestor.poll)(100)
        got = []
        while not got or got[-1]["type"] != "events":
            got.append(await communicator.receive_json_from(timeout=5))
        await database_sync_to_async(publish_checkpoint)(checkpoint)
        got.append(await communicator.receive_json_from(timeout=5))
        await communicator.disconnect()
        return got

    try:
        got = async_to_sync(scenario)()
    finally:
        redis_client.srem(runs_set(), run.key)
    *states, batch, ckpt = got
    assert {m["type"] for m in states} == {"run"}
    assert states[-1]["run"]["status"] == "running"
    assert states[-1]["run"]["id"] == run.pk
    assert [e["kind"] for e in batch["events"]] == ["heartbeat", "metric", "log"]
    assert (batch["first_seq"], batch["last_seq"]) == (1, 3)
    assert batch["events"][1]["data"] == {"rollout/reward/mean": 0.5}
    assert ckpt == {"type": "checkpoint", "checkpoint": ckpt["checkpoint"]}
    assert (ckpt["checkpoint"]["id"], ckpt["checkpoint"]["hf_status"]) == (checkpoint.pk, "absent")
