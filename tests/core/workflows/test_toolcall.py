"""``toolcall_workflow`` and ``toolcall_reward`` (Trinity-RFT's ToolCallWorkflow, Tool-N1 rules):
the reward worked case by case from the rules in ``rft_core/rewards/toolcall.py``, the prompt
built from a ToolACE row, and Trinity's toolace config pointed at the row's own columns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from toolace import CALLS, TOOLACE_ROW, TRUTH

from rft_core import rewards, workflows
from rft_core.config import check_registered_names, load_config
from rft_core.data.task import Task
from rft_core.errors import DataError
from rft_core.registries import registered_names_table


def score(response: str, truth: str = TRUTH) -> float:
    return rewards.score("toolcall_reward", response, truth, {})["accuracy"]


def test_the_reference_calls_in_any_order_and_argument_order_score_one():
    swapped = [
        {"name": "time", "arguments": {"zone": "CET"}},
        {"name": "weather", "arguments": {"unit": "C", "city": "Paris"}},
    ]
    assert score(f"<think>two calls</think><tool_call>{json.dumps(CALLS)}</tool_call>") == 1.0
    assert score(f"<think>x</think> <tool_call>{json.dumps(swapped)}</tool_call>") == 1.0


@pytest.mark.parametrize(
    "response",
    [
        # no think block; two think blocks; think after the call
        f"<tool_call>{json.dumps(CALLS)}</tool_call>",
        f"<think>a</think><think>b</think><tool_call>{json.dumps(CALLS)}</tool_call>",
        f"<tool_call>{json.dumps(CALLS)}</tool_call><think>late</think>",
        # a wrong argument value; one call missing; a call without arguments; not JSON
        "<think>x</think><tool_call>"
        + json.dumps([CALLS[0] | {"arguments": {"city": "Rome", "unit": "C"}}, CALLS[1]])
        + "</tool_call>",
        f"<think>x</think><tool_call>{json.dumps(CALLS[:1])}</tool_call>",
        '<think>x</think><tool_call>[{"name": "weather"}]</tool_call>',
        "<think>x</think><tool_call>[{name: weather}]</tool_call>",
        "<think>no call at all</think>",
    ],
)
def test_anything_else_scores_zero(response):
    assert score(response) == 0.0


def test_the_last_block_counts_and_a_single_object_is_a_list_of_one():
    one = json.dumps([CALLS[1]])
    assert score(f"<think>x</think><tool_call>{json.dumps(CALLS[1])}</tool_call>", one) == 1.0
    wrong_then_right = f"<tool_call>[]</tool_call><tool_call>{one}</tool_call>"
    assert score(f"<think>x</think>{wrong_then_right}", one) == 1.0
    assert score("<think>none needed</think><tool_call>[]</tool_call>", "[]") == 1.0


def test_a_truth_that_is_not_json_is_a_data_error():
    with pytest.raises(DataError, match="the truth is not JSON tool calls"):
        score("<think>x</think><tool_call>[]</tool_call>", "weather(Paris)")


def _task(row: dict) -> Task:
    return Task(index=3, taskset="toolace", raw=row, prompt="", truth=row.get("answer"))


def test_the_prompt_is_built_from_the_rows_own_columns():
    workflow = workflows.get("toolcall_workflow")({})
    messages = workflow.messages(_task(TOOLACE_ROW))
    system = messages[0]
    assert system["role"] == "system"
    assert system["content"].startswith("You are a helpful assistant.# Tool\n\n<tools>\n")
    assert '{"type": "function", "function": {"name": "weather"' in system["content"]
    assert [m["role"] for m in messages[1:]] == ["user", "assistant", "tool", "assistant"]
    assert json.loads(messages[2]["content"]) == {"name": "weather", "arguments": {"city": "Paris"}}
    assert workflows.get("tool_call_workflow") is workflows.get("toolcall_workflow")


def test_a_row_without_the_toolace_columns_names_the_missing_one():
    row = {k: v for k, v in TOOLACE_ROW.items() if k != "tools"}
    with pytest.raises(DataError, match="row 3 of taskset 'toolace' has no 'tools' column"):
        workflows.get("toolcall_workflow")({}).messages(_task(row))


def test_trinitys_toolace_config_reads_conversations_and_answer(monkeypatch):
    monkeypatch.delenv("TRINITY_TASKSET_PATH", raising=False)
    path = Path(__file__).parents[1] / "trinity_configs" / "grpo_toolcall.yaml"
    cfg = load_config(path)
    check_registered_names(cfg, registered_names_table())
    fmt = cfg.buffer.explorer_input.taskset.format
    assert (fmt.prompt_key, fmt.response_key) == ("conversations", "answer")


def test_the_validators_table_and_the_workflow_agree_on_the_columns():
    from rft_core.config.workflow_columns import WORKFLOW_FORMAT_DEFAULTS
    from rft_core.workflows.toolcall import FORMAT_DEFAULTS

    assert WORKFLOW_FORMAT_DEFAULTS == {
        "toolcall_workflow": FORMAT_DEFAULTS,
        "tool_call_workflow": FORMAT_DEFAULTS,
    }
