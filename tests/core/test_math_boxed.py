"""Trinity-RFT's ``math_boxed_workflow`` and ``math_boxed_reward`` (its mix_chord example's
workflow): the last ``\\boxed{}`` decides accuracy, ``with_think`` adds the think-block check."""

from __future__ import annotations

import pytest

from rft_core import rewards, workflows
from rft_core.data.task import Task
from rft_core.workflows.math import BOXED_SYSTEM_PROMPT, BOXED_THINK_SYSTEM_PROMPT


@pytest.mark.parametrize(
    ("response", "with_think", "expected"),
    [
        ("so 3 + 4 = \\boxed{7}", False, {"accuracy": 1.0, "format_score": 0.0}),
        ("\\boxed{6} no wait \\boxed{7}", False, {"accuracy": 1.0, "format_score": 0.0}),
        ("the answer is 7", False, {"accuracy": 0.0, "format_score": 0.0}),  # no box
        ("<think>3+4</think> \\boxed{7}", True, {"accuracy": 1.0, "format_score": 0.0}),
        ("\\boxed{7}", True, {"accuracy": 1.0, "format_score": -0.1}),
        ("</think><think> \\boxed{8}", True, {"accuracy": 0.0, "format_score": -0.1}),
    ],
)
def test_math_boxed_reward(response, with_think, expected):
    got = rewards.score("math_boxed_reward", response, "#### 7", {"with_think": with_think})
    assert got == expected


def _task(**kw) -> Task:
    return Task(index=0, taskset="t", raw={}, prompt="3+4?", truth="7", **kw)


def test_math_boxed_workflow_prompt_and_think_settings_from_workflow_args():
    cls = workflows.get("math_boxed_workflow")
    plain, think = cls({}), cls({"with_think": True, "format_score_coef": 0.5})
    assert plain.messages(_task())[0] == {"role": "system", "content": BOXED_SYSTEM_PROMPT}
    assert think.messages(_task())[0]["content"] == BOXED_THINK_SYSTEM_PROMPT
    assert plain.messages(_task(system_prompt="box it"))[0]["content"] == "box it"
    assert plain.score(_task(), "\\boxed{7}", "math_boxed_reward") == {
        "accuracy": 1.0,
        "format_score": 0.0,
    }
    assert think.score(_task(), "\\boxed{7}", "math_boxed_reward")["format_score"] == -0.5
