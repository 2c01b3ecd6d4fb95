"""A run's downloads: ``/runs/<id>/metrics.csv`` and ``metrics.json`` (every series the run's
monitor sent, through the real monitor, Redis and ingestor, with step, stage and wall time) and
``/checkpoints/<id>/hf.tar`` (a converted checkpoint streamed as one tar that transformers
loads after extraction); owner and staff only, another user gets a 404."""

from __future__ import annotations

import csv
import io
import json
import tarfile
from datetime import datetime

import pyarrow as pa
import pytest
from api_helpers import ingest_stream, make_experiment, make_run, make_user, session_client

from rft_core.monitor import ENV_REDIS_URL, ENV_RUN_ID, build_monitor, stream_key
from webapp.audit.models import AuditEvent
from webapp.checkpoints.archive import MEMBER_CHUNK
from webapp.checkpoints.models import Checkpoint, HFStatus
from webapp.runs.downloads import csv_chunks
from webapp.runs.metric_reads import Points
from webapp.runs.models import MetricPoint

EVAL = "eval/arithmetic-eval/accuracy/mean@1"
REWARD = "rollout/reward/mean"
# what the explorer reports: a reward each step, an eval every second step, in two stages
STEPS = {"sft_warmup": (1, 2), "grpo": (1, 2, 3, 4)}


def _eval(stage: str, step: int) -> float:
    return round(0.1 * step + (0.5 if stage == "grpo" else 0.0), 3)


@pytest.fixture
def ingested(alice, unique_id, tmp_path, monkeypatch, redis_url, redis_client):
    """A run whose metrics came through the real monitor, Redis stream and ingestor."""
    run = make_run(make_experiment(alice, "downloads"), key=unique_id, job_dir=str(tmp_path))
    redis_client.test_keys.append(stream_key(run.key))
    monkeypatch.setenv(ENV_REDIS_URL, redis_url)
    monkeypatch.setenv(ENV_RUN_ID, run.key)
    monkeypatch.setenv("RFT_HEARTBEAT_S", "3600")
    for stage, steps in STEPS.items():
        with build_monitor("none", {}, tmp_path, role="explorer", run_name="d", stage=stage) as m:
            for step in steps:
                m.log({REWARD: step / 8}, step=step)
                if step % 2 == 0:
                    m.log({EVAL: _eval(stage, step)}, step=step)
    ingest_stream(redis_url, redis_client, run.key)
    return run


def _body(response) -> bytes:
    assert response.status_code == 200, response
    assert response.streaming, "a download is streamed, not built in memory first"
    return b"".join(response.streaming_content)


@pytest.mark.django_db(transaction=True)
def test_the_metrics_csv_holds_the_eval_series_with_step_stage_and_wall_time(ingested, alice):
    response = session_client(alice).get(f"/runs/{ingested.pk}/metrics.csv")
    assert response["Content-Type"].startswith("text/csv")
    assert f'filename="run-{ingested.pk}-metrics.csv"' in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(_body(response).decode())))
    evals = [r for r in rows if r["name"] == EVAL]
    # the eval series: steps 2 of sft_warmup, then 2 and 4 of grpo, in the order sent
    assert [(r["stage"], int(r["step"]), float(r["value"])) for r in evals] == [
        ("sft_warmup", 2, 0.2), ("grpo", 2, 0.7), ("grpo", 4, 0.9)
    ]  # fmt: skip
    assert {r["role"] for r in evals} == {"explorer"}
    stored = MetricPoint.objects.filter(run=ingested, name=EVAL).order_by("id")
    assert [float(r["wall_time"]) for r in evals] == [p.wall_time for p in stored]
    iso = [datetime.fromisoformat(r["wall_time_iso"]) for r in evals]
    assert [abs(t.timestamp() - p.wall_time) < 0.001 for t, p in zip(iso, stored, strict=True)] == [
        True
    ] * 3
    assert all(r["wall_time_iso"].endswith("Z") for r in rows)
    assert len([r for r in rows if r["name"] == REWARD]) == 6
    assert len(rows) == MetricPoint.objects.filter(run=ingested).count() == 9


@pytest.mark.django_db(transaction=True)
def test_the_metrics_json_holds_every_series(ingested, alice):
    body = json.loads(_body(session_client(alice).get(f"/runs/{ingested.pk}/metrics.json")))
    assert body["run"]["id"] == ingested.pk
    assert body["columns"] == ["step", "stage", "wall_time", "value"]
    series = {s["name"]: s for s in body["series"]}
    assert sorted(series) == [EVAL, REWARD]
    assert [p[:2] + p[3:] for p in series[EVAL]["points"]] == [
        [2, "sft_warmup", 0.2], [2, "grpo", 0.7], [4, "grpo", 0.9]
    ]  # fmt: skip
    assert len(series[REWARD]["points"]) == 6 and series[REWARD]["role"] == "explorer"


def test_a_run_without_metrics_gives_the_csv_header_alone():
    assert b"".join(csv_chunks(iter([]))) == b"name,role,stage,step,wall_time,value,wall_time_iso\n"


def _points(name, role, stage, step, wall_time, value) -> Points:
    """One point as the columns the writers take."""
    return Points(
        name, role, stage, pa.array([step], pa.int64()), pa.array([wall_time], pa.float64()),
        pa.array([value], pa.float64()),
    )  # fmt: skip


def test_csv_fields_with_commas_quotes_and_missing_values_read_back():
    rows = [('loss, "total"', "trainer", "", None, 1.5, None), ("a", "", "grpo", 3, 2.0, -0.25)]
    text = b"".join(csv_chunks(_points(*row) for row in rows)).decode()
    read = list(csv.reader(io.StringIO(text)))[1:]
    assert read == [
        ['loss, "total"', "trainer", "", "", "1.5", "", "1970-01-01T00:00:01.500Z"],
        ["a", "", "grpo", "3", "2.0", "-0.25", "1970-01-01T00:00:02.000Z"],
    ]


# ---------------------------------------------------------------- the checkpoint archive


@pytest.fixture
def converted(alice, tmp_path):
    """A converted checkpoint: a small Qwen2 written by transformers (weights over one read
    chunk, so the archive must come in several pieces)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
    )  # fmt: skip
    model = Qwen2ForCausalLM(config)
    hf = tmp_path / "job" / "global_step_4" / "actor" / "huggingface"
    model.save_pretrained(hf)
    run = make_run(make_experiment(alice, "archive"), job_dir=str(tmp_path / "job"))
    checkpoint = Checkpoint.objects.create(
        run=run, stage="grpo", step=4, path=str(hf.parents[1]),
        hf_status=HFStatus.READY, hf_path=str(hf),
    )  # fmt: skip
    return checkpoint, model


@pytest.mark.django_db
def test_the_archive_streams_a_checkpoint_transformers_loads(converted, alice, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    checkpoint, model = converted
    response = session_client(alice).get(f"/checkpoints/{checkpoint.pk}/hf.tar")
    assert response.status_code == 200 and response.streaming
    pieces = list(response.streaming_content)
    weights = sum(p.stat().st_size for p in (tmp_path / "job").rglob("*.safetensors"))
    assert weights > MEMBER_CHUNK and max(len(p) for p in pieces) <= MEMBER_CHUNK
    data = b"".join(pieces)
    assert int(response["Content-Length"]) == len(data)
    top = f"run-{checkpoint.run_id}-grpo-step-4-hf"
    assert response["Content-Disposition"] == f'attachment; filename="{top}.tar"'
    out = tmp_path / "extracted"
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert {"config.json", "model.safetensors"} <= {
            m.name.split("/", 1)[1] for m in tar.getmembers()
        }
        tar.extractall(out, filter="data")
    loaded = AutoModelForCausalLM.from_pretrained(out / top)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


@pytest.mark.django_db
def test_a_checkpoint_not_converted_is_a_409_saying_so(alice):
    run = make_run(make_experiment(alice, "raw"))
    checkpoint = Checkpoint.objects.create(run=run, step=2, path="/nowhere/global_step_2")
    response = session_client(alice).get(f"/checkpoints/{checkpoint.pk}/hf.tar")
    assert response.status_code == 409
    assert "global_step_2 has no converted directory" in response.content.decode()


# ---------------------------------------------------------------- who may download


@pytest.mark.django_db
def test_another_user_gets_a_404_for_every_download_and_staff_get_them(tmp_path):
    alice, bob = make_user("alice"), make_user("bob")
    run = make_run(make_experiment(alice, "private"))
    MetricPoint.objects.create(run=run, name=EVAL, step=1, wall_time=1.0, value=0.5)
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    checkpoint = Checkpoint.objects.create(
        run=run, step=1, path=str(tmp_path), hf_status=HFStatus.READY, hf_path=str(hf)
    )
    urls = [
        f"/runs/{run.pk}/metrics.csv",
        f"/runs/{run.pk}/metrics.json",
        f"/runs/{run.pk}/logs.txt",
        f"/checkpoints/{checkpoint.pk}/hf.tar",
    ]
    other = session_client(bob)
    for url in urls:
        response = other.get(url)
        assert response.status_code == 404, url
        assert b"private" not in response.content and b"0.5" not in response.content
    denied = AuditEvent.objects.filter(action="permission.denied", actor_id=bob.pk)
    assert denied.count() == len(urls)
    staff = session_client(make_user("root", staff=True))
    for url in urls:
        assert staff.get(url).status_code == 200, url
    assert session_client(alice).get(f"/runs/{run.pk + 99}/metrics.csv").status_code == 404
