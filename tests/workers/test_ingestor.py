"""The ingestor reads a real Redis stream written by the real monitor, stores each entry once
(also when the stream is replayed or a crashed batch is recovered), projects each new event
into metric points, log lines, checkpoints and run status, fans it out through channels_redis
to ``run-<run pk>``, and acks it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import redis
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer

from rft_core.monitor import ENV_REDIS_URL, ENV_RUN_ID, build_monitor, runs_set, stream_key
from webapp.audit.models import AuditEvent
from webapp.checkpoints.models import Checkpoint, HFStatus
from webapp.events.models import RunEvent
from webapp.ingest.store import event_rows, store_events
from webapp.runs.models import LogLine, MetricPoint, RolloutSample, Run, RunStatus
from workers.ingestor import Ingestor

pytestmark = pytest.mark.django_db(transaction=True)

KINDS = ["heartbeat", "status", "metric", "metric", "log", "checkpoint", "status"]


def _step_dir(job: Path, n: int) -> Path:
    """A full checkpoint with finished HF weights, as the trainer leaves it."""
    hf = job / f"global_step_{n}" / "actor" / "huggingface"
    hf.mkdir(parents=True)
    (hf / "config.json").write_text("{}")
    (hf / "model.safetensors").write_bytes(b"w" * 64)
    (job / f"global_step_{n}" / ".full_checkpoint").write_text(f"{n}\n")
    return job / f"global_step_{n}"


def _write_stream(job: Path, monkeypatch, redis_url: str, run_key: str) -> None:
    """Seven events of ``run_key`` through build_monitor's Redis sink: the heartbeat it sends
    at start, then six the test writes."""
    monkeypatch.setenv(ENV_REDIS_URL, redis_url)
    monkeypatch.setenv(ENV_RUN_ID, run_key)
    monkeypatch.setenv("RFT_HEARTBEAT_S", "3600")
    monitor = build_monitor("tensorboard", {}, job, role="trainer", run_name="demo", stage="rft")
    monitor.status("running", "trainer started")
    monitor.log({"actor/pg_loss": 0.5, "eval/gsm8k/accuracy/mean@1": 0.25}, step=1)
    monitor.log({"actor/pg_loss": math.nan, "eval/gsm8k/accuracy/mean@1": 0.125}, step=2)
    monitor.log_line("trainer step 2 done", "WARNING")
    monitor.checkpoint_saved(2, str(_step_dir(job, 2)))
    monitor.status("finished", "trainer finished at step 2")
    monitor.close()


@pytest.fixture
def run_stream(run, tmp_path, monkeypatch, redis_url, redis_client):
    redis_client.test_keys.append(stream_key(run.key))
    _write_stream(tmp_path, monkeypatch, redis_url, run.key)
    yield run.key
    redis_client.srem(runs_set(), run.key)


def _ingestor(redis_url, run_key, group, consumer="consumer-a"):
    return Ingestor(redis.Redis.from_url(redis_url), consumer, group=group, only_runs={run_key})


def _counts(run: Run) -> dict[str, int]:
    return {
        "events": RunEvent.objects.filter(run_key=run.key).count(),
        "metrics": MetricPoint.objects.filter(run=run).count(),
        "logs": LogLine.objects.filter(run=run).count(),
        "checkpoints": Checkpoint.objects.filter(run=run).count(),
        "audit": AuditEvent.objects.count(),
    }


def test_it_stores_each_stream_entry_as_one_row(run_stream, redis_url):
    ingestor = _ingestor(redis_url, run_stream, f"g-{run_stream}")
    assert ingestor.poll(block_ms=100) == 7
    rows = list(RunEvent.objects.filter(run_key=run_stream).order_by("pk"))
    assert [r.kind for r in rows] == KINDS
    assert [r.step for r in rows] == [None, None, 1, 2, None, 2, None]
    assert rows[2].payload == {"actor/pg_loss": 0.5, "eval/gsm8k/accuracy/mean@1": 0.25}
    # NaN is kept as null: PostgreSQL's jsonb and browsers refuse NaN
    assert rows[3].payload == {"actor/pg_loss": None, "eval/gsm8k/accuracy/mean@1": 0.125}
    assert {(r.role, r.stage) for r in rows} == {("trainer", "rft")}


def test_it_projects_metrics_logs_checkpoints_and_status(run_stream, run, redis_url, tmp_path):
    _ingestor(redis_url, run_stream, f"g-{run_stream}").poll(block_ms=100)
    points = MetricPoint.objects.filter(run=run).order_by("id")
    assert [(p.name, p.role, p.stage, p.step, p.value) for p in points] == [
        ("actor/pg_loss", "trainer", "rft", 1, 0.5),
        ("eval/gsm8k/accuracy/mean@1", "trainer", "rft", 1, 0.25),
        ("actor/pg_loss", "trainer", "rft", 2, None),
        ("eval/gsm8k/accuracy/mean@1", "trainer", "rft", 2, 0.125),
    ]
    (line,) = LogLine.objects.filter(run=run)
    assert (line.actor, line.level, line.stage, line.text) == (
        "trainer",
        "WARNING",
        "rft",
        "trainer step 2 done",
    )
    (checkpoint,) = Checkpoint.objects.filter(run=run)
    assert (checkpoint.stage, checkpoint.step, checkpoint.hf_status) == ("rft", 2, HFStatus.READY)
    assert checkpoint.path == str(tmp_path / "global_step_2")
    assert checkpoint.size_bytes == 2 + 64 + 2  # config.json, weights, marker
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING  # first heartbeat / "running"
    assert run.last_heartbeat is not None
    assert (run.stage, run.step) == ("rft", 2)
    assert (run.last_eval_accuracy, run.best_eval_accuracy) == (0.125, 0.25)


def test_it_acks_so_a_second_poll_handles_nothing(run_stream, redis_url, redis_client):
    group = f"g-{run_stream}"
    ingestor = _ingestor(redis_url, run_stream, group)
    ingestor.poll(block_ms=100)
    assert ingestor.poll(block_ms=100) == 0
    assert redis_client.xpending(stream_key(run_stream), group)["pending"] == 0


def test_a_replayed_stream_writes_no_second_row_of_anything(
    run_stream, run, redis_url, redis_client
):
    groups = [f"g1-{run_stream}", f"g2-{run_stream}", f"g3-{run_stream}"]
    for group in groups:  # the other groups exist first: g1 trims nothing they have not read
        redis_client.xgroup_create(stream_key(run_stream), group, id="0")
    _ingestor(redis_url, run_stream, groups[0]).poll(block_ms=100)
    once = _counts(run)
    assert once["events"] == 7 and once["metrics"] == 4 and once["checkpoints"] == 1
    # Two more consumer groups read the whole stream again from the start: same entries, same ids.
    for group in groups[1:]:
        assert _ingestor(redis_url, run_stream, group).poll(block_ms=100) == 7
        assert _counts(run) == once
    seqs = RunEvent.objects.filter(run_key=run_stream).order_by("seq")
    assert list(seqs.values_list("seq", flat=True)) == [1, 2, 3, 4, 5, 6, 7]


def test_a_batch_stored_before_a_crash_is_projected_once_on_recovery(
    run_stream, run, redis_url, redis_client
):
    group = f"g-{run_stream}"
    key = stream_key(run_stream)
    ingestor = _ingestor(redis_url, run_stream, group)
    ingestor.discover()
    # The crash: consumer-a got the entries and committed the first four, then died unacked.
    ((_, entries),) = redis_client.xreadgroup(group, "consumer-a", {key: ">"}, count=10)
    store_events(run_stream, event_rows(run_stream, entries[:4]))
    assert redis_client.xpending(key, group)["pending"] == 7
    assert _ingestor(redis_url, run_stream, group).recover_own_pending() == 7
    assert redis_client.xpending(key, group)["pending"] == 0
    counts = _counts(run)
    assert (counts["events"], counts["metrics"], counts["logs"], counts["checkpoints"]) == (
        7,
        4,
        1,
        1,
    )


def test_nul_characters_and_infinities_are_stored_on_every_database(
    run, tmp_path, monkeypatch, redis_url, redis_client
):
    redis_client.test_keys.append(stream_key(run.key))
    monkeypatch.setenv(ENV_REDIS_URL, redis_url)
    monkeypatch.setenv(ENV_RUN_ID, run.key)
    monkeypatch.setenv("RFT_HEARTBEAT_S", "3600")
    with build_monitor("none", {}, tmp_path, role="explorer", run_name="demo") as monitor:
        monitor.log_line("binary \x00 in a response", "INFO")
        monitor.log({"response_length/max": math.inf}, step=1)
    try:
        assert _ingestor(redis_url, run.key, f"g-{run.key}").poll(block_ms=100) == 3
    finally:
        redis_client.srem(runs_set(), run.key)
    assert LogLine.objects.get(run=run).text == "binary \ufffd in a response"
    assert MetricPoint.objects.get(run=run).value is None


def test_events_of_a_key_without_a_run_keep_their_run_events_only(
    tmp_path, monkeypatch, redis_url, redis_client, unique_id
):
    orphan = f"{unique_id}-cli"
    redis_client.test_keys.append(stream_key(orphan))
    _write_stream(tmp_path, monkeypatch, redis_url, orphan)
    try:
        assert _ingestor(redis_url, orphan, f"g-{orphan}").poll(block_ms=100) == 7
    finally:
        redis_client.srem(runs_set(), orphan)
    assert RunEvent.objects.filter(run_key=orphan).count() == 7
    assert MetricPoint.objects.count() == LogLine.objects.count() == Checkpoint.objects.count() == 0


def test_it_sends_each_batch_as_one_events_message_to_the_group_of_the_runs_pk(
    run_stream, run, redis_url
):
    layer = get_channel_layer()
    group = f"run-{run.pk}"

    async def listen_while(ingest):
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        await sync_to_async(ingest)()
        messages = []
        while True:  # run and checkpoint states, then the one events batch
            message = json.loads((await layer.receive(channel))["text"])
            messages.append(message)
            if message["type"] == "events":
                break
        await layer.group_discard(group, channel)
        return messages

    ingestor = _ingestor(redis_url, run_stream, f"g-{run_stream}")
    messages = async_to_sync(listen_while)(lambda: ingestor.poll(block_ms=100))
    batch = messages[-1]
    assert (batch["first_seq"], batch["last_seq"]) == (1, 7)
    assert [e["kind"] for e in batch["events"]] == KINDS
    assert [e["seq"] for e in batch["events"]] == [1, 2, 3, 4, 5, 6, 7]
    metric = batch["events"][2]
    assert metric == {
        "seq": 3,
        "kind": "metric",
        "role": "trainer",
        "stage": "rft",
        "step": 1,
        "ts": metric["ts"],
        "data": {"actor/pg_loss": 0.5, "eval/gsm8k/accuracy/mean@1": 0.25},
    }
    # the state changes the batch made were published on commit, before the batch
    states = messages[:-1]
    assert {m["type"] for m in states} == {"run", "checkpoint"}
    assert [m["run"]["status"] for m in states if m["type"] == "run"][-1] == "running"
    (ckpt,) = [m["checkpoint"] for m in states if m["type"] == "checkpoint"]
    assert (ckpt["run_id"], ckpt["step"], ckpt["hf_status"]) == (run.pk, 2, "ready")


def test_it_trims_only_entries_every_group_has_acked(run_stream, redis_url, redis_client):
    key = stream_key(run_stream)
    ids = [e[0] for e in redis_client.xrange(key)]
    other = f"other-{run_stream}"
    redis_client.xgroup_create(key, other, id="0")
    # a consumer of another group (another deployment) took three and has not stored them
    redis_client.xreadgroup(other, "slow-consumer", {key: ">"}, count=3)
    assert _ingestor(redis_url, run_stream, f"g-{run_stream}").poll(block_ms=100) == 7
    assert [e[0] for e in redis_client.xrange(key)] == ids  # its pending three keep all
    assert _ingestor(redis_url, run_stream, other, "slow-consumer").recover_own_pending() == 3
    assert [e[0] for e in redis_client.xrange(key)] == ids[3:]  # it has not read the rest
    assert _ingestor(redis_url, run_stream, other, "slow-consumer").poll(block_ms=100) == 4
    assert redis_client.xlen(key) == 0  # stored and acked by every group: all trimmed
    assert RunEvent.objects.filter(run_key=run_stream).count() == 7


def test_one_ingestor_at_a_time_reads_a_stream(run_stream, redis_url, redis_client):
    group = f"g-{run_stream}"
    first = _ingestor(redis_url, run_stream, group, "consumer-a")
    second = _ingestor(redis_url, run_stream, group, "consumer-b")
    first.discover()
    second.discover()
    assert first._lease(stream_key(run_stream)) is True
    assert second.poll(block_ms=100) == 0  # a's lease: b waits
    assert first.poll(block_ms=100) == 7
    first.release()
    fields = {"run": run_stream, "kind": "log", "role": "x", "stage": "", "step": "",
              "ts": "1.0", "data": "{}"}  # fmt: skip
    redis_client.xadd(stream_key(run_stream), fields)
    assert second.poll(block_ms=100) == 1  # released: b takes the stream over
    seqs = RunEvent.objects.filter(run_key=run_stream).values_list("seq", flat=True)
    assert sorted(seqs) == list(range(1, 9))


def test_it_keeps_entries_a_second_group_has_not_read(run_stream, redis_url, redis_client):
    key = stream_key(run_stream)
    redis_client.xgroup_create(key, f"other-{run_stream}", id="0")
    assert _ingestor(redis_url, run_stream, f"g-{run_stream}").poll(block_ms=100) == 7
    assert redis_client.xlen(key) == 7


def test_it_numbers_a_runs_events_densely_across_batches(run, redis_url, redis_client):
    key = stream_key(run.key)
    redis_client.test_keys.append(key)
    for i in range(25):
        fields = {"run": run.key, "kind": "metric", "role": "explorer", "stage": "",
                  "step": str(i), "ts": "1.5", "data": '{"x": 1}'}  # fmt: skip
        redis_client.xadd(key, fields)
        if i == 3:
            fields["kind"] = "bogus"  # malformed: skipped, takes no seq
            redis_client.xadd(key, fields)
    ingestor = _ingestor(redis_url, run.key, f"g-{run.key}")
    ingestor.discover()
    entries = redis_client.xrange(key)
    for chunk in (entries[:7], entries[7:8], entries[3:20], entries[20:]):  # overlapping
        ingestor._handle(key, chunk)
    rows = RunEvent.objects.filter(run_key=run.key).order_by("seq")
    assert list(rows.values_list("seq", flat=True)) == list(range(1, 26))
    assert list(rows.values_list("step", flat=True)) == list(range(25))
    assert list(MetricPoint.objects.filter(run=run).values_list("seq", flat=True)) == list(
        range(1, 26)
    )


def test_samples_events_become_rollout_samples(run, tmp_path, monkeypatch, redis_url, redis_client):
    redis_client.test_keys.append(stream_key(run.key))
    monkeypatch.setenv(ENV_REDIS_URL, redis_url)
    monkeypatch.setenv(ENV_RUN_ID, run.key)
    monkeypatch.setenv("RFT_HEARTBEAT_S", "3600")
    with build_monitor("none", {}, tmp_path, role="explorer", run_name="d", stage="rft") as monitor:
        monitor.samples(
            [
                {"prompt": "1+1?", "response": "2", "truth": "2", "reward": 1.0, "accuracy": 1.0},
                {"prompt": "2+2?", "response": "5", "truth": "4", "reward": math.nan},
            ],
            step=3,
        )
    try:
        assert _ingestor(redis_url, run.key, f"g-{run.key}").poll(block_ms=100) == 2
    finally:
        redis_client.srem(runs_set(), run.key)
    rows = RolloutSample.objects.filter(run=run).order_by("id")
    assert [(r.stage, r.step, r.seq, r.prompt, r.response, r.truth, r.reward, r.extra)
            for r in rows] == [
        ("rft", 3, 2, "1+1?", "2", "2", 1.0, {"accuracy": 1.0}),
        ("rft", 3, 2, "2+2?", "5", "4", None, {}),
    ]  # fmt: skip


def test_it_recovers_entries_a_crashed_consumer_left_unacked(run_stream, redis_url, redis_client):
    group = f"g-{run_stream}"
    key = stream_key(run_stream)
    ingestor = _ingestor(redis_url, run_stream, group)
    ingestor.discover()
    # Simulate a crash: the entries are delivered to consumer-a but never stored nor acked.
    redis_client.xreadgroup(group, "consumer-a", {key: ">"}, count=10)
    assert redis_client.xpending(key, group)["pending"] == 7
    assert _ingestor(redis_url, run_stream, group).recover_own_pending() == 7
    assert RunEvent.objects.filter(run_key=run_stream).count() == 7
    assert redis_client.xpending(key, group)["pending"] == 0


def test_a_stream_deleted_under_a_blocking_read_does_not_end_the_ingestor(redis_url, unique_id):
    """Redis answers a read blocked on a stream that is deleted with ``UNBLOCKED``; the
    ingestor forgets that stream and goes on with the others."""
    import threading

    from rft_core.monitor import MonitorEvent

    client = redis.Redis.from_url(redis_url)
    doomed, alive = f"{unique_id}-doomed", f"{unique_id}-alive"
    keys = [stream_key(doomed), stream_key(alive)]
    try:
        for key in keys:
            client.xgroup_create(key, f"g-{unique_id}", id="0", mkstream=True)
        ingestor = Ingestor(
            redis.Redis.from_url(redis_url), "c", group=f"g-{unique_id}", only_runs={doomed, alive}
        )
        ingestor.discover()
        timer = threading.Timer(0.3, client.delete, args=[keys[0]])
        timer.start()
        assert ingestor.poll(block_ms=3000) == 0  # blocked on both streams when one went away
        timer.join()
        assert ingestor.streams == {keys[1]}
        event = MonitorEvent(run_id=alive, kind="log", role="explorer", data={"text": "hi"})
        client.xadd(keys[1], event.to_fields())
        assert ingestor.poll(block_ms=1000) == 1
        assert RunEvent.objects.filter(run_key=alive).count() == 1
    finally:
        client.delete(*keys)
        client.close()


def test_a_batch_whose_store_fails_stays_pending_and_is_stored_once_on_redelivery(
    run_stream, run, redis_url, redis_client, monkeypatch
):
    """In process: the store raises a database error for the batch (the first call only);
    its entries are not acked (XPENDING lists all 7 for the consumer), nothing is stored; the
    next round claims the same entries again and stores each exactly once."""
    from django.db import OperationalError

    import workers.ingestor as ingestor_module

    group, key = f"g-{run_stream}", stream_key(run_stream)
    real_record = ingestor_module.record_events
    calls = []

    def record_failing_once(run_key, entries):
        calls.append(len(entries))
        if len(calls) == 1:
            raise OperationalError("database is locked")
        return real_record(run_key, entries)

    monkeypatch.setattr(ingestor_module, "record_events", record_failing_once)
    monkeypatch.setattr(ingestor_module, "RETRY_S", 0.0)  # retried at the next round
    ingestor = _ingestor(redis_url, run_stream, group)
    assert ingestor.poll(block_ms=100) == 0
    pending = redis_client.xpending(key, group)
    assert pending["pending"] == 7
    assert pending["consumers"] == [{"name": b"consumer-a", "pending": 7}]
    assert _counts(run)["events"] == 0
    assert ingestor.poll(block_ms=100) == 7  # the pending entries, claimed again
    assert calls == [7, 7]
    assert redis_client.xpending(key, group)["pending"] == 0
    assert ingestor.poll(block_ms=100) == 0
    counts = _counts(run)
    assert (counts["events"], counts["metrics"], counts["logs"], counts["checkpoints"]) == (
        7,
        4,
        1,
        1,
    )
    seqs = RunEvent.objects.filter(run_key=run_stream).values_list("seq", flat=True)
    assert sorted(seqs) == [1, 2, 3, 4, 5, 6, 7]
