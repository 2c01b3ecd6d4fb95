"""The ``samples`` event: a handful of one rollout step's experiences, written by the real
monitor to ``monitor/<role>_samples.jsonl`` and the run's Redis stream, and emitted by a real
explorer step (the tiny demo model on CPU)."""

from __future__ import annotations

import json
import math

import pytest

from rft_core.config import load_config_from_dict
from rft_core.demo import build_demo
from rft_core.monitor import MonitorEvent, build_monitor, runs_set, stream_key
from tests.core.test_orchestration import _config


@pytest.fixture
def dashboard_run(monkeypatch, redis_client, redis_url, unique_id):
    monkeypatch.setenv("RFT_EVENTS_REDIS_URL", redis_url)
    monkeypatch.setenv("RFT_RUN_ID", unique_id)
    monkeypatch.setenv("RFT_HEARTBEAT_S", "3600")
    redis_client.test_keys.append(stream_key(unique_id))
    yield unique_id
    redis_client.srem(runs_set(), unique_id)


def test_samples_go_to_the_jsonl_file_and_the_stream(tmp_path, redis_client, dashboard_run):
    rows = [
        {"prompt": "1+1?", "response": "2", "truth": "2", "reward": 1.0},
        {"prompt": "2+2?", "response": "5", "truth": "4", "reward": math.nan},
    ]
    with build_monitor("none", {}, tmp_path, role="explorer", run_name="d", stage="rft") as m:
        m.samples(rows, step=7)
        m.samples([], step=8)  # nothing sampled: no event
    lines = [json.loads(x) for x in (tmp_path / "monitor/explorer_samples.jsonl").open()]
    assert [(x["step"], x["prompt"], x["reward"]) for x in lines] == [
        (7, "1+1?", 1.0),
        (7, "2+2?", None),  # NaN as null: the file stays JSON
    ]
    events = [
        MonitorEvent.from_fields(f) for _, f in redis_client.xrange(stream_key(dashboard_run))
    ]
    (sample,) = [e for e in events if e.kind == "samples"]
    assert (sample.step, sample.stage, sample.role) == (7, "rft", "explorer")
    assert sample.data["samples"][0] == rows[0]


def test_an_explorer_step_emits_its_first_rollouts_as_samples(tmp_path, monkeypatch):
    from rft_core.data import TasksetReader, load_training_tasksets
    from rft_core.explorer import Explorer

    monkeypatch.delenv("RFT_EVENTS_REDIS_URL", raising=False)
    monkeypatch.setenv("RFT_SAMPLES_PER_STEP", "3")
    demo = build_demo(tmp_path / "demo")
    cfg = load_config_from_dict(
        {**_config(demo, tmp_path, "samples"), "monitor": {"monitor_type": "none"}}
    )
    explorer = Explorer(cfg)
    try:
        explorer._build_engine()
        reader = TasksetReader(
            load_training_tasksets(cfg.buffer.explorer_input.all_tasksets),
            batch_size=cfg.buffer.batch_size,
            total_epochs=1,
            total_steps=None,
        )
        tasks = reader.next_batch()
        explorer.explore_step(tasks)  # 2 tasks x repeat_times 2 = 4 experiences
    finally:
        explorer.close_engine()
        explorer.close()
    path = explorer.job_dir / "monitor" / "explorer_samples.jsonl"
    lines = [json.loads(x) for x in path.open()]
    assert len(lines) == 3  # RFT_SAMPLES_PER_STEP
    assert {x["step"] for x in lines} == {1}
    # task order: the first group's two responses, then the second task's first
    assert [x["prompt"] for x in lines] == [tasks[0].prompt, tasks[0].prompt, tasks[1].prompt]
    assert [x["truth"] for x in lines] == [tasks[0].truth, tasks[0].truth, tasks[1].truth]
    assert [x["task_index"] for x in lines] == [tasks[0].index, tasks[0].index, tasks[1].index]
    for x in lines:
        assert isinstance(x["response"], str)
        assert x["reward"] == pytest.approx(sum(x["reward_parts"].values()))
        assert x["reward_parts"]  # math_reward's parts (accuracy, format)
