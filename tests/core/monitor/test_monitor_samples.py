"""The ``samples`` event: a handful of one rollout step's experiences, written by the real
monitor to ``monitor/<role>_samples.jsonl`` and the run's Redis stream, and emitted by a real
explorer step (the tiny demo model on CPU)."""

from __future__ import annotations

import json
import math

import pytest
from run_configs import run_config

from rft_core.config import load_config_from_dict
from rft_core.demo import build_demo
from rft_core.monitor import MonitorEvent, build_monitor, runs_set, stream_key


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


def _explore(tmp_path, steps: int, **monitor):
    """``steps`` real explorer steps of the tiny demo model (2 tasks x repeat_times 2); the
    lines of monitor/explorer_samples.jsonl, the tasks of each step and the explorer's
    tokenizer."""
    from rft_core.data import TasksetReader, load_training_tasksets
    from rft_core.explorer.explorer import Explorer

    demo = build_demo(tmp_path / "demo")
    cfg = load_config_from_dict(
        {**run_config(demo, tmp_path, "samples"), "monitor": {"monitor_type": "none", **monitor}}
    )
    explorer = Explorer(cfg)
    tasks = []
    put = []  # what the trainer's buffer gets: the experiences with their token ids
    try:
        explorer._build_engine()
        explorer._buffer = type("Buffer", (), {"put": staticmethod(put.extend)})()
        reader = TasksetReader(
            load_training_tasksets(cfg.buffer.explorer_input.all_tasksets),
            batch_size=cfg.buffer.batch_size,
            total_epochs=1,
            total_steps=None,
        )
        for _ in range(steps):
            tasks.append(reader.next_batch())
            explorer.explore_step(tasks[-1])
        tokenizer = explorer._engine.tokenizer
    finally:
        explorer.close_engine()
        explorer.close()
    path = explorer.job_dir / "monitor" / "explorer_samples.jsonl"
    lines = [json.loads(x) for x in path.open()] if path.exists() else []
    return lines, tasks, tokenizer, demo, put


def test_an_explorer_step_emits_its_first_task_groups_as_samples(tmp_path, monkeypatch):
    monkeypatch.delenv("RFT_EVENTS_REDIS_URL", raising=False)
    lines, (tasks,), *_ = _explore(tmp_path, 1, rollout_samples_per_step=3)
    assert len(lines) == 3  # monitor.rollout_samples_per_step
    assert {x["step"] for x in lines} == {1}
    # task order: the first group's two responses, then the second task's first
    assert [x["prompt"] for x in lines] == [tasks[0].prompt, tasks[0].prompt, tasks[1].prompt]
    assert [x["group"] for x in lines] == [0, 0, 1]
    assert [x["truth"] for x in lines] == [tasks[0].truth, tasks[0].truth, tasks[1].truth]
    assert [x["task_index"] for x in lines] == [tasks[0].index, tasks[0].index, tasks[1].index]
    for x in lines:
        assert isinstance(x["response"], str)
        assert x["reward"] == pytest.approx(sum(x["reward_parts"].values()))
        assert x["reward_parts"]  # math_reward's parts (accuracy, format)
    # GRPO in the explorer: the first group's advantages are its rewards, centred and scaled
    first = lines[:2]
    if first[0]["reward"] == first[1]["reward"]:
        assert [x["advantage"] for x in first] == [0.0, 0.0]
    else:
        assert sum(x["advantage"] for x in first) == pytest.approx(0.0, abs=1e-5)
        best = max(first, key=lambda x: x["reward"])
        assert best["advantage"] > 0


def test_the_samples_carry_each_response_token_and_its_sampling_logprob(tmp_path, monkeypatch):
    """The token view's data: each response token as text with the log-prob the engine sampled
    it with, which a teacher-forced forward pass of the same weights reproduces."""
    import torch
    from transformers import AutoModelForCausalLM

    from rft_core.modeling import token_logprobs

    monkeypatch.delenv("RFT_EVENTS_REDIS_URL", raising=False)
    lines, _, tokenizer, demo, experiences = _explore(tmp_path, 1, rollout_samples_per_step=4)
    assert len(lines) == len(experiences) == 4  # 2 tasks x repeat_times 2, all kept
    model = AutoModelForCausalLM.from_pretrained(demo.model_dir, dtype=torch.float32).eval()
    for x, exp in zip(lines, experiences, strict=True):
        assert len(x["tokens"]) == len(x["logprobs"]) == x["response_length"] > 0
        assert x["response_length"] == len(exp.response_ids)
        assert x["prompt_length"] == len(exp.prompt_ids)
        assert x["truncated"] == (x["response_length"] == 6)  # model.max_response_tokens
        assert x["tokens"] == [tokenizer.decode([i]) for i in exp.response_ids]
        assert all(lp <= 0 for lp in x["logprobs"])
        assert x["advantage"] == pytest.approx(exp.advantage)
        ids = torch.tensor([exp.prompt_ids + exp.response_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(exp.prompt_ids) - 1 : -1]
        expected = token_logprobs(logits, ids[0, len(exp.prompt_ids) :], temperature=1.0)
        assert x["logprobs"] == pytest.approx(expected.tolist(), abs=2e-3)


def test_the_interval_keeps_the_rollouts_of_steps_1_1_plus_n_and_so_on(tmp_path, monkeypatch):
    monkeypatch.delenv("RFT_EVENTS_REDIS_URL", raising=False)
    lines, *_ = _explore(
        tmp_path,
        3,
        rollout_samples_per_step=2,
        rollout_samples_interval=2,
        rollout_token_logprobs=False,
    )
    assert [x["step"] for x in lines] == [1, 1, 3, 3]  # step 2 skipped; each step a whole group
    assert [x["group"] for x in lines] == [0, 0, 0, 0]
    assert all("tokens" not in x and "logprobs" not in x for x in lines)


@pytest.mark.parametrize(
    ("key", "value", "rule"),
    [("rollout_samples_per_step", -1, ">= 0"), ("rollout_samples_interval", 0, ">= 1")],
)
def test_a_bad_retention_setting_is_refused_with_its_path(tmp_path, key, value, rule):
    from rft_core.errors import ConfigError

    demo = build_demo(tmp_path / "demo")
    with pytest.raises(ConfigError) as err:
        load_config_from_dict({**run_config(demo, tmp_path, "bad"), "monitor": {key: value}})
    assert f"monitor.{key}" in str(err.value) and rule in str(err.value)
