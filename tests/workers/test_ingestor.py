"""The ingestor reads a real Redis stream written by the real monitor, stores each entry once
(also when the stream is replayed), fans it out through channels_redis, and acks it."""

from __future__ import annotations

import pytest
import redis
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer

from rft_core.monitor import RUNS_SET, build_monitor, stream_key
from webapp.events.models import RunEvent
from workers.ingestor import Ingestor

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run_stream(tmp_path, monkeypatch, redis_url, redis_client, unique_id):
    """Six events of run ``unique_id`` written through build_monitor's Redis sink: the
    heartbeat it sends at start, then five the test writes."""
    monkeypatch.setenv("RFT_EVENTS_REDIS_URL", redis_url)
    monkeypatch.setenv("RFT_RUN_ID", unique_id)
    monkeypatch.setenv("RFT_HEARTBEAT_S", "3600")
    redis_client.test_keys.append(stream_key(unique_id))
    monitor = build_monitor("tensorboard", {}, tmp_path, role="trainer", run_name="demo")
    monitor.status("running")
    monitor.log({"actor/pg_loss": 0.5, "actor/ppo_kl": 0.25}, step=1)
    monitor.log({"actor/pg_loss": 0.375}, step=2)
    monitor.checkpoint_saved(2, "/ckpt/global_step_2")
    monitor.status("finished")
    monitor.close()
    yield unique_id
    redis_client.srem(RUNS_SET, unique_id)


def _ingestor(redis_url, run_id, group):
    client = redis.Redis.from_url(redis_url)
    return Ingestor(client, "consumer-a", group=group, only_runs={run_id})


def test_it_stores_each_stream_entry_as_one_row(run_stream, redis_url):
    ingestor = _ingestor(redis_url, run_stream, f"g-{run_stream}")
    assert ingestor.poll(block_ms=100) == 6
    rows = list(RunEvent.objects.filter(run_key=run_stream).order_by("pk"))
    assert [(r.kind, r.step) for r in rows] == [
        ("heartbeat", None),
        ("status", None),
        ("metric", 1),
        ("metric", 2),
        ("checkpoint", 2),
        ("status", None),
    ]
    assert rows[2].payload == {"actor/pg_loss": 0.5, "actor/ppo_kl": 0.25}
    assert rows[4].payload == {"path": "/ckpt/global_step_2"}
    assert {r.role for r in rows} == {"trainer"}


def test_it_acks_so_a_second_poll_handles_nothing(run_stream, redis_url, redis_client):
    group = f"g-{run_stream}"
    ingestor = _ingestor(redis_url, run_stream, group)
    ingestor.poll(block_ms=100)
    assert ingestor.poll(block_ms=100) == 0
    assert redis_client.xpending(stream_key(run_stream), group)["pending"] == 0


def test_a_replayed_stream_writes_no_duplicate_rows(run_stream, redis_url):
    _ingestor(redis_url, run_stream, f"g1-{run_stream}").poll(block_ms=100)
    # A second consumer group reads the whole stream again from the start: same entries, same ids.
    assert _ingestor(redis_url, run_stream, f"g2-{run_stream}").poll(block_ms=100) == 6
    assert RunEvent.objects.filter(run_key=run_stream).count() == 6


def test_it_fans_new_events_out_to_the_run_group(run_stream, redis_url):
    layer = get_channel_layer()
    group = f"run-{run_stream}"

    async def listen_while(ingest):
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        await sync_to_async(ingest)()
        messages = [await layer.receive(channel) for _ in range(6)]
        await layer.group_discard(group, channel)
        return messages

    ingestor = _ingestor(redis_url, run_stream, f"g-{run_stream}")
    messages = async_to_sync(listen_while)(lambda: ingestor.poll(block_ms=100))
    assert [m["event"]["kind"] for m in messages] == [
        "heartbeat",
        "status",
        "metric",
        "metric",
        "checkpoint",
        "status",
    ]
    assert messages[2]["event"]["data"] == {"actor/pg_loss": 0.5, "actor/ppo_kl": 0.25}
    assert messages[2]["event"]["id"] == RunEvent.objects.get(run_key=run_stream, step=1).pk


def test_it_recovers_entries_a_crashed_consumer_left_unacked(run_stream, redis_url, redis_client):
    group = f"g-{run_stream}"
    key = stream_key(run_stream)
    ingestor = _ingestor(redis_url, run_stream, group)
    ingestor.discover()
    # Simulate a crash: the entries are delivered to consumer-a but never stored nor acked.
    redis_client.xreadgroup(group, "consumer-a", {key: ">"}, count=10)
    assert redis_client.xpending(key, group)["pending"] == 6
    assert _ingestor(redis_url, run_stream, group).recover_own_pending() == 6
    assert RunEvent.objects.filter(run_key=run_stream).count() == 6
    assert redis_client.xpending(key, group)["pending"] == 0
