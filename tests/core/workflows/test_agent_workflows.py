"""Agent workflows on the run's OpenAI endpoint (``rft_core.workflows.agent``,
``react_math``): the calculator by hand; a ReAct episode whose tool call and result go through the
real endpoint and ``openai`` client (the engine is scripted so that the model calls the tool: the
tiny models never write a well-formed call), one experience per call with the episode's reward;
the agent workflows that need an outside service refused at load in one line; and two real
steps of ``as_react_workflow`` with the demo model, explorer and trainer in one process."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import pytest
from frozen_lake_play import ScriptedEngine
from omegaconf import OmegaConf
from run_configs import run_config, run_taskset

from rft_core.config import check_registered_names, load_config, load_config_from_dict
from rft_core.data.task import Task
from rft_core.errors import ConfigError
from rft_core.registries import registered_names_table
from rft_core.rollout.openai_server import stop_endpoint
from rft_core.runtime.in_process import InProcessRun
from rft_core.workflows import get
from rft_core.workflows.react_math import calculate, run_tool

TOOL_CALL = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "2+3"}}\n</tool_call>'


def test_the_calculator_by_hand():
    assert calculate("(12 + 3) * 4") == "60"
    assert calculate("7 / 2") == "3.5"
    assert calculate("8 / 2") == "4"  # an integral float reads as an integer
    assert calculate("-2 ** 2") == "-4" and calculate("17 // 5 + 17 % 5") == "5"
    assert calculate("1 / 0").startswith("Error: ")
    assert calculate("2 ** 1000") == "Error: exponent 1000 is larger than 100"
    assert calculate("__import__('os').getcwd()").startswith("Error: unsupported syntax")
    assert calculate("'a' * 3").startswith("Error: unsupported syntax")
    assert run_tool("calculate", '{"expression": "6*7"}') == "42"
    assert run_tool("python", "{}") == "Error: unknown tool 'python'; the tool is calculate"
    assert run_tool("calculate", "{oops").startswith("Error: the arguments are not JSON")


def math_task(index: int, *, is_eval: bool = False) -> Task:
    return Task(
        index=index,
        taskset="sums",
        raw={},
        prompt="What is 2+3?",
        truth="#### 5",
        workflow="as_react_workflow",
        rollout_args={"temperature": 1.0, "max_tokens": 32},
        is_eval=is_eval,
    )


def calculator_agent_script(conversation: str) -> str:
    """The model calls the calculator first, then answers with the tool's result."""
    if "<tool_response>\n5\n</tool_response>" in conversation:
        return "The sum is \\boxed{5}."
    return TOOL_CALL


def test_a_react_episode_calls_the_tool_through_the_endpoint_one_experience_per_call():
    engine = ScriptedEngine(calculator_agent_script)
    workflow = get("as_react_workflow")({"max_turns": 3})
    try:
        experiences = workflow.run_batch([math_task(0)], engine, repeat_times=2)
    finally:
        stop_endpoint(engine)
    # 2 episodes x 2 calls (the tool call, the answer); the repeats' calls went out together
    assert len(experiences) == 4
    assert sum(engine.calls) == 4
    tok = engine.tokenizer
    by_run = {run: [e for e in experiences if e.info["run_id"] == run] for run in ("0", "1")}
    for first, second in by_run.values():
        assert [first.info["step"], second.info["step"]] == [0, 1]
        assert [first.info["last_turn"], second.info["last_turn"]] == [False, True]
        assert first.info["steps"] == second.info["steps"] == 2
        # the episode's reward on every call: math_boxed_reward, accuracy 1 + format_score 0
        for exp in (first, second):
            assert exp.reward == 1.0 and exp.metrics["accuracy"] == 1.0
            assert exp.metrics["tool_calls"] == 1.0 and exp.metrics["agent_calls"] == 2.0
            assert exp.group_id == "sums:0" and exp.model_version == 3
            assert len(exp.response_ids) == len(exp.logprobs)
        prompt0, prompt1 = tok.decode(first.prompt_ids), tok.decode(second.prompt_ids)
        assert "What is 2+3?" in prompt0 and '"name": "calculate"' in prompt0
        assert tok.decode(first.response_ids) == TOOL_CALL + "<|im_end|>"
        # call 1's prompt is call 0's conversation, the call, and the calculator's answer
        assert TOOL_CALL in prompt1 and "<tool_response>\n5\n</tool_response>" in prompt1
        assert second.response_text == "The sum is \\boxed{5}."
        assert second.info["answer"] == "The sum is \\boxed{5}."
    # the endpoint is gone once the run stops it
    assert not any(t.name == "openai-endpoint" for t in threading.enumerate())


def test_an_eval_episode_keeps_its_last_call():
    engine = ScriptedEngine(calculator_agent_script)
    try:
        experiences = get("as_react_workflow")({}).run_batch(
            [math_task(0, is_eval=True)], engine, repeat_times=1
        )
    finally:
        stop_endpoint(engine)
    (exp,) = experiences
    assert exp.info["step"] == 1 and exp.info["steps"] == 2 and exp.reward == 1.0


def test_an_agent_that_runs_out_of_turns_scores_its_last_reply():
    engine = ScriptedEngine(lambda conversation: TOOL_CALL)  # calls the tool forever
    try:
        experiences = get("agentscope_reactv2_math_workflow")({"max_turns": 2}).run_batch(
            [math_task(0)], engine, repeat_times=1
        )
    finally:
        stop_endpoint(engine)
    assert len(experiences) == 2
    assert all(e.reward == 0.0 and e.metrics["finished"] == 0.0 for e in experiences)


def _trinity_like(workflow: str, **taskset) -> dict:
    return {
        "model": {"model_path": "/models/none"},
        "buffer": {
            "batch_size": 2,
            "explorer_input": {
                "taskset": {"name": "t", "path": "/data/none", **taskset},
                "default_workflow_type": workflow,
            },
        },
    }


@pytest.mark.parametrize(
    ("workflow", "service"),
    [
        ("agentscope_v1_react_search_workflow", "a web search API (Tavily or SearXNG"),
        ("email_search_workflow", "the Enron e-mail corpus database"),
        ("bcp_simple_react_workflow", "the BrowseComp-Plus document index"),
        ("agentopia_workflow", "an AgentOpia / AppWorld environment service"),
    ],
)
def test_agent_workflows_that_need_an_outside_service_are_refused_in_one_line(workflow, service):
    with pytest.raises(ConfigError) as err:
        check_registered_names(
            load_config_from_dict(_trinity_like(workflow)), registered_names_table()
        )
    line = str(err.value)
    assert "\n" not in line
    assert err.value.path == "buffer.explorer_input.taskset.default_workflow_type"
    assert f"workflow {workflow!r} needs {service}" in line
    assert "--plugin-dir" in line


def test_the_react_names_of_trinitys_examples_load():
    for name in (
        "as_react_workflow",
        "agentscope_react_workflow",
        "agentscope_react_math_workflow",
        "agentscope_reactv2_math_workflow",
        "agentscope_reactv2_gsm8k_workflow",
    ):
        check_registered_names(load_config_from_dict(_trinity_like(name)), registered_names_table())
    with pytest.raises(ConfigError, match="e-mail corpus"):
        get("as_react_workflow")({"type": "email_search"})


def test_two_steps_of_the_react_agent_on_the_demo_model(demo, tmp_path):
    taskset = run_taskset(demo, "train", "arithmetic")
    taskset["default_workflow_type"] = "as_react_workflow"
    taskset["rollout_args"] = {"temperature": 1.0, "max_tokens": 12}
    taskset["workflow_args"] = {"max_turns": 2, "system_prompt": "Answer in \\boxed{}."}
    cfg = run_config(
        demo,
        tmp_path,
        "react",
        synchronizer={"sync_method": "memory"},
        model={"max_response_tokens": 12, "max_model_len": 1024},
        buffer={"total_steps": 2},
        trainer={"max_token_len_per_gpu": 4096},
    )
    cfg["mode"] = "colocate"
    cfg["buffer"]["explorer_input"]["taskset"] = taskset
    cfg["buffer"]["trainer_input"]["experience_buffer"]["path"] = str(tmp_path / "exp.jsonl")
    run = InProcessRun(load_config_from_dict(cfg))
    summaries = run.run()
    assert summaries["trainer"]["steps"] == 2
    assert not any(t.name == "openai-endpoint" for t in threading.enumerate())
    rows = [json.loads(line) for line in (tmp_path / "exp.jsonl").read_text().splitlines()]
    # 2 steps x 2 tasks x 2 repeats = 8 episodes of 1 or 2 calls: one experience per call
    assert 8 <= len(rows) <= 16
    episodes: dict[tuple, list[dict]] = {}
    for row in rows:
        assert len(row["response_ids"]) == len(row["logprobs"]) > 0
        assert all(lp <= 0 for lp in row["logprobs"])
        key = (row["explorer_step"], row["group_id"], row["info"]["run_id"])
        episodes.setdefault(key, []).append(row)
    assert len(episodes) == 8
    for calls in episodes.values():
        assert [c["info"]["step"] for c in calls] == list(range(calls[0]["info"]["steps"]))
        assert len({c["reward"] for c in calls}) == 1  # the episode's reward on each call
    metrics = [
        json.loads(line)
        for line in (tmp_path / "orchestration" / "react" / "monitor" / "explorer_metrics.jsonl")
        .read_text()
        .splitlines()
    ]
    rollout = [
        m.get("metrics", m) for m in metrics if "rollout/agent_calls/mean" in m.get("metrics", m)
    ]
    assert len(rollout) == 2
    for m in rollout:
        assert 1.0 <= m["rollout/agent_calls/mean"] <= 2.0
        assert all(math.isfinite(v) for v in m.values() if isinstance(v, float))


CORPUS = Path(__file__).parents[1] / "trinity_configs"


@pytest.mark.parametrize(
    ("stem", "refused"),
    [
        ("agentscope_react_gsm8k", None),
        ("agentscope_tool_react_gsm8k", None),
        ("agentscope_websearch", "a web search API"),
        ("grpo_email_search", "the Enron e-mail corpus database"),
    ],
)
def test_trinitys_agent_examples_reach_their_workflow(stem, refused, monkeypatch, tmp_path):
    # the keys other parts of issue 22 handle are taken out: multi_step_grpo (read as grpo here),
    # add_strategy, use_priority_queue, and a train_batch_size of several experiences per run
    monkeypatch.setenv("TRINITY_TASKSET_PATH", "/data/gsm8k")
    d = OmegaConf.load(CORPUS / f"{stem}.yaml")
    d.algorithm.algorithm_type = "grpo"
    d.algorithm.pop("add_strategy", None)
    d.buffer.trainer_input.experience_buffer.pop("use_priority_queue", None)
    d.buffer.pop("train_batch_size", None)
    if stem == "agentscope_websearch":  # its token budget is smaller than one sequence
        d.trainer.trainer_config.actor_rollout_ref.actor.ppo_max_token_len_per_gpu = 20480
    OmegaConf.save(d, tmp_path / "cfg.yaml")
    cfg = load_config(tmp_path / "cfg.yaml")
    if refused is None:
        check_registered_names(cfg, registered_names_table())
        return
    with pytest.raises(ConfigError) as err:
        check_registered_names(cfg, registered_names_table())
    assert err.value.path == "buffer.explorer_input.taskset.default_workflow_type"
    assert refused in str(err.value) and "\n" not in str(err.value)
