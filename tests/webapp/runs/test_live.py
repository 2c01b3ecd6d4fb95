"""The live run page's JSON: ``GET /runs/<id>/live.json`` (the snapshot, and ``?after=<seq>``
pages of events) built from rows the real ingestor stored, its access rule and refusals, and
the Cancel / Convert POSTs answering JSON when the page asks for it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from api_helpers import ingest_stream
from django.contrib.auth import get_user_model
from django.test import Client

from rft_core.monitor import ENV_REDIS_URL, ENV_RUN_ID, build_monitor, stream_key
from webapp.checkpoints.models import Checkpoint
from webapp.events.models import RunEvent
from webapp.runs import live
from webapp.runs.models import Run, RunStatus

pytestmark = pytest.mark.django_db(transaction=True)


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def ingested(run, tmp_path, monkeypatch, redis_url, redis_client):
    """Two stages of events through the real monitor and the real ingestor."""
    redis_client.test_keys.append(stream_key(run.key))
    monkeypatch.setenv(ENV_REDIS_URL, redis_url)
    monkeypatch.setenv(ENV_RUN_ID, run.key)
    monkeypatch.setenv("RFT_HEARTBEAT_S", "3600")
    for stage in ("sft_warmup", "rft"):
        with build_monitor("none", {}, tmp_path, role="explorer", run_name="d", stage=stage) as m:
            m.status("running", f"{stage} started")
            for step in (1, 2):
                m.log({"rollout/reward/mean": step / 4, "time/explore_step": 1.5}, step=step)
                m.log_line(f"{stage} step {step}", "INFO")
            m.samples([{"prompt": "q", "response": "a", "truth": "t", "reward": 1.0}], step=2)
    ingest_stream(redis_url, redis_client, run.key)
    return run


def test_the_snapshot_holds_every_metric_point_stage_log_and_sample(ingested, alice):
    body = _client(alice).get(f"/runs/{ingested.pk}/live.json").json()
    total = RunEvent.objects.filter(run_key=ingested.key).count()
    assert body["seq"] == total == 2 * (1 + 1 + 2 + 2 + 1)  # heartbeat, status, 2 metrics...
    assert body["run"]["id"] == ingested.pk and body["run"]["status"] == "running"
    assert body["run"]["url"] == f"/runs/{ingested.pk}/"
    reward = body["metrics"]["rollout/reward/mean"]
    assert reward == {
        "role": "explorer",
        "step": [1, 2, 1, 2],
        "wall_time": reward["wall_time"],
        "value": [0.25, 0.5, 0.25, 0.5],
        "stage": ["sft_warmup", "sft_warmup", "rft", "rft"],
    }
    assert [s["name"] for s in body["stages"]] == ["sft_warmup", "rft"]
    assert body["stages"][0]["end"] <= body["stages"][1]["start"]
    assert [line["text"] for line in body["logs"]] == [
        "sft_warmup step 1",
        "sft_warmup step 2",
        "rft step 1",
        "rft step 2",
    ]
    assert all(line["seq"] for line in body["logs"])
    assert [(s["stage"], s["step"], s["prompt"], s["reward"]) for s in body["samples"]] == [
        ("sft_warmup", 2, "q", 1.0),
        ("rft", 2, "q", 1.0),
    ]
    assert body["checkpoints"] == []


def test_after_pages_the_events_in_seq_order(ingested, alice, monkeypatch):
    client = _client(alice)
    monkeypatch.setattr(live, "EVENTS_PAGE", 5)
    seen, seq, more = [], 3, True
    while more:
        body = client.get(f"/runs/{ingested.pk}/live.json?after={seq}").json()
        seen += [e["seq"] for e in body["events"]]
        seq, more = body["seq"], body["more"]
    assert seen == list(range(4, 15))
    assert body["run"]["status"] == "running"
    last = client.get(f"/runs/{ingested.pk}/live.json?after={seq}").json()
    assert (last["events"], last["more"], last["seq"]) == ([], False, 14)


def test_the_snapshot_leaves_later_events_to_the_deltas(run, alice):
    now = datetime.now(tz=UTC)
    for seq in (1, 2):
        RunEvent.objects.create(
            run_key=run.key, stream_id=f"1-{seq}", seq=seq, kind="metric", emitted_at=now
        )
    run.metric_points.create(name="m", wall_time=1.0, value=1.0, seq=2)
    run.metric_points.create(name="m", wall_time=2.0, value=2.0, seq=3)  # event not yet seen
    body = _client(alice).get(f"/runs/{run.pk}/live.json").json()
    assert (body["seq"], body["metrics"]["m"]["value"]) == (2, [1.0])


def test_it_refuses_others_unknown_runs_and_a_bad_after_with_json(run):
    bob = get_user_model().objects.create_user("bob", password=None)
    client = _client(bob)
    denied = client.get(f"/runs/{run.pk}/live.json")
    assert denied.status_code == 403 and "another user" in denied.json()["detail"]
    missing = client.get("/runs/999999/live.json")
    assert missing.status_code == 404 and "does not exist" in missing.json()["detail"]
    assert Client().get(f"/runs/{run.pk}/live.json").status_code == 403
    owner = _client(run.experiment.owner)
    for bad in ("x", "-1", "1.5"):
        answer = owner.get(f"/runs/{run.pk}/live.json?after={bad}")
        assert answer.status_code == 400
        assert answer.json()["detail"].startswith("after: must be a sequence number")


def test_cancel_answers_the_run_state_as_json(run, alice):
    Run.objects.filter(pk=run.pk).update(status=RunStatus.QUEUED)
    client = _client(alice)
    answer = client.post(f"/runs/{run.pk}/cancel/", HTTP_ACCEPT="application/json")
    assert answer.status_code == 200
    assert answer.json()["run"]["status"] == "cancelled"
    again = client.post(f"/runs/{run.pk}/cancel/", HTTP_ACCEPT="application/json")
    assert again.status_code == 409 and "already cancelled" in again.json()["detail"]


def test_convert_answers_json_and_refuses_a_step_gone_from_disk(run, alice, tmp_path):
    checkpoint = Checkpoint.objects.create(
        run=run, stage="", step=3, path=str(tmp_path / "global_step_3")
    )
    client = _client(alice)
    answer = client.post(f"/checkpoints/{checkpoint.pk}/convert/", HTTP_ACCEPT="application/json")
    assert answer.status_code == 409
    assert "gone from disk" in answer.json()["detail"]
    checkpoint.refresh_from_db()
    assert checkpoint.hf_status == "absent"  # nothing written
    bob = get_user_model().objects.create_user("bob", password=None)
    other = _client(bob).post(
        f"/checkpoints/{checkpoint.pk}/convert/", HTTP_ACCEPT="application/json"
    )
    assert other.status_code == 403 and "detail" in other.json()
