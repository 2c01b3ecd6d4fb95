"""``math_boxed_workflow``: Trinity-RFT's prompts, ``use_base`` raw prompts, and the
``with_think`` / ``format_score_coef`` arguments reaching the reward (expectations ported from
Trinity's tests/explorer/workflow_test.py::test_math_boxed_workflow)."""

from __future__ import annotations

import pytest
from run_configs import check_names, workflow_config
from workflow_engines import ScriptedEngine, task

from rft_core import workflows
from rft_core.rollout.base import Generation
from rft_core.workflows.math_boxed import BOXED_SYSTEM_PROMPT, BOXED_THINK_SYSTEM_PROMPT

TRINITY_REPLIES = {
    "q": [
        "<think> balabalabala 99 </think>\n \\boxed{36}",
        "answer is \\boxed{36 }",
        "Kim's total points are 6 + 30 =\\boxed{36}",
        "<think> balalaba </think> \\boxed{35.00}",
    ]
}


class RawPromptEngine(ScriptedEngine):
    """Also answers raw prompt strings (by their text)."""

    def generate(self, prompts, params):
        self.calls.append((prompts, params))
        return [
            [Generation([1], [7] * len(t), [-0.1] * len(t), t, "stop") for t in self.replies[p]]
            for p in prompts
        ]


def run_boxed(args, tasks, replies=TRINITY_REPLIES, repeat_times=4):
    engine = RawPromptEngine(replies)
    exps = workflows.get("math_boxed_workflow")(args).run_batch(tasks, engine, repeat_times)
    return engine, exps


def test_rewards_without_think_are_accuracy_only():
    engine, exps = run_boxed({"with_think": False, "format_score_coef": 0.2}, [task(0, "q", "36")])
    assert [e.reward for e in exps] == [1.0, 1.0, 1.0, 0.0]
    assert engine.calls[0][0][0][0] == {"role": "system", "content": BOXED_SYSTEM_PROMPT}
    assert exps[0].info["reward_fn"] == "math_boxed_reward"


def test_with_think_asks_for_think_and_takes_the_coef_off():
    engine, exps = run_boxed({"with_think": True, "format_score_coef": 0.2}, [task(0, "q", "36")])
    assert [e.reward for e in exps] == pytest.approx([1.0, 0.8, 0.8, 0.0])
    assert engine.calls[0][0][0][0] == {"role": "system", "content": BOXED_THINK_SYSTEM_PROMPT}


def test_use_base_sends_trinitys_raw_prompt_without_the_chat_template():
    prompt = f"System:{BOXED_SYSTEM_PROMPT}\nUser:\nq\nAssistant:\n"
    engine, exps = run_boxed({"use_base": True}, [task(0, "q", "36")], {prompt: ["\\boxed{36}"]}, 1)
    assert engine.calls[0][0] == [prompt]
    assert exps[0].reward == 1.0
    # a taskset that gives "" as its system prompt: no System line
    engine, _ = run_boxed(
        {"use_base": True},
        [task(0, "q", "36", system_prompt="")],
        {"User:\nq\nAssistant:\n": ["x"]},
        1,
    )
    assert engine.calls[0][0] == ["User:\nq\nAssistant:\n"]


def test_dapo_reward_gets_the_response_length_in_tokens():
    args = {
        "enable_overlong_penalty": True,
        "penalty_factor": 1.0,
        "max_response_length": 20,
        "cache_length": 4,
    }
    replies = {"q": ["\\boxed{36}", "\\boxed{36}" + " " * 8]}  # 10 and 18 tokens (one per char)
    _, exps = run_boxed(
        {}, [task(0, "q", "36", reward_fn="math_dapo_reward", reward_fn_args=args)], replies, 2
    )
    assert [e.metrics for e in exps] == [
        {"accuracy": 1.0, "format_score": 0.0},
        {"accuracy": 1.0, "format_score": -0.5},  # (16 - 18) / 4
    ]


def test_unused_workflow_args_are_named_at_load_time(caplog):
    # Trinity's dapo example sets DAPO's overlong settings in workflow_args; they do nothing
    # there: the config check names each with its YAML path (test_workflow_args_check.py has
    # the rest of the check)
    args = {"use_base": True, "enable_overlong_penalty": True, "cache_length": 4096}
    with caplog.at_level("WARNING"):
        check_names(workflow_config("math_boxed_workflow", workflow_args=args))
    text = caplog.text
    path = "buffer.explorer_input.taskset.workflow_args"
    assert f"{path}.cache_length: not taken by math_boxed_workflow, ignored" in text
    assert f"{path}.enable_overlong_penalty: not taken by math_boxed_workflow" in text
    assert f"{path}.use_base" not in text
