"""``math_rm_workflow``: responses judged by an auxiliary model through our own ``hf`` engine.

The judge here is the tiny demo model, whose replies are junk: the tests check the plumbing
(the judge sees the question, reference and response; one batched judge call; greedy, so the
same prompt gets the same reply; the reward is what the reply's score parses to) and, on a
fake judge reply, only the score parsing."""

from __future__ import annotations

from pathlib import Path

import pytest
from workflow_engines import ScriptedEngine, demo_judge, task

from rft_core import workflows
from rft_core.errors import ConfigError
from rft_core.workflows.math_rm import parse_judge_score

SHORT_JUDGE = "Q:{question} A:{reference} R:{response} Score {score_min}-{score_max}:"


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("The answer matches. <score>8</score>", 8.0),
        ("<score> 3.5 </score> then <SCORE>7</SCORE>", 7.0),  # the last one counts
        ("Score: 6", 6.0),
        ("score = 0", 0.0),
        ("<score>11</score>", None),  # out of range
        ("<score>-1</score>", None),
        ("I think it is fine", None),
        ("<score>eight</score>", None),
    ],
)
def test_judge_score_parsing(reply, score):
    assert parse_judge_score(reply, 0, 10) == score


@pytest.fixture(scope="module")
def judge(tmp_path_factory):
    return demo_judge(tmp_path_factory.mktemp("judge"), max_prompt_tokens=200)


def test_judge_scores_each_response_in_one_batched_call(judge):
    policy = ScriptedEngine({"1+2=?": ["<answer>3</answer>", "<answer>4</answer>"]})
    calls = []
    chat = judge.engine.chat
    judge.engine.chat = lambda convs, params: calls.append((convs, params)) or chat(convs, params)
    try:
        workflow = workflows.get("math_rm_workflow")(
            {"judge_prompt": SHORT_JUDGE, "judge_system_prompt": ""}, auxiliary_models=[judge]
        )
        exps = workflow.run_batch([task(0, "1+2=?", "3"), task(1, "1+2=?", "3")], policy, 2)
    finally:
        judge.engine.chat = chat
    # one judge call for the 4 responses, greedy, n=1, max_tokens from the entry
    assert len(calls) == 1
    conversations, params = calls[0]
    assert (params.n, params.temperature, params.max_tokens) == (1, 0.0, 8)
    assert conversations[0] == [
        {"role": "user", "content": "Q:1+2=? A:3 R:<answer>3</answer> Score 0-10:"}
    ]
    assert conversations[1][0]["content"].endswith("R:<answer>4</answer> Score 0-10:")
    replies = [e.info["judge_reply"] for e in exps]
    # greedy: the same judge prompt gets the same reply (tasks 0 and 1 are the same question)
    assert replies[0] == replies[2] and replies[1] == replies[3]
    for exp in exps:
        parsed = parse_judge_score(exp.info["judge_reply"], 0, 10)
        assert exp.info["judge_parsed"] == (parsed is not None)
        assert exp.metrics == {"judge_score": 0.0 if parsed is None else parsed / 10}
        assert exp.reward == exp.metrics["judge_score"]
        assert exp.info["reward_fn"] == "judge"


def test_a_task_reward_fn_adds_its_parts_beside_the_judge(judge):
    policy = ScriptedEngine({"1+2=?": ["<think>1+2</think><answer>3</answer>"]})
    workflow = workflows.get("math_rm_workflow")(
        {"judge_prompt": SHORT_JUDGE, "judge_system_prompt": ""}, auxiliary_models=[judge]
    )
    (exp,) = workflow.run_batch([task(0, "1+2=?", "3", reward_fn="math_reward")], policy, 1)
    assert exp.metrics["accuracy"] == 1.0 and exp.metrics["format_score"] == 0.1
    assert exp.reward == pytest.approx(1.1 + exp.metrics["judge_score"])


def test_without_an_auxiliary_model_it_says_what_to_add():
    policy = ScriptedEngine({"q": ["a"]})
    with pytest.raises(ConfigError) as err:
        workflows.get("math_rm_workflow")({}).run_batch([task(0, "q", "1")], policy, 1)
    assert err.value.path == "explorer.auxiliary_models"
    assert "model_path" in str(err.value)
    assert policy.calls == []  # refused before generating


def test_a_missing_judge_model_is_named_before_the_run_starts(tmp_path):
    import yaml

    from rft_core.config import load_config_from_dict
    from rft_core.runtime.preflight import preflight

    seed = Path(__file__).resolve().parents[3] / "examples" / "grpo_gsm8k" / "gsm8k.yaml"
    d = yaml.safe_load(seed.read_text())
    d["explorer"]["auxiliary_models"] = [{"model_path": str(tmp_path / "no_judge")}]
    with pytest.raises(ConfigError) as info:
        preflight(load_config_from_dict(d))
    assert "explorer.auxiliary_models[0].model_path" in str(info.value)
    assert "no_judge" in str(info.value) and "huggingface-cli download" in str(info.value)
