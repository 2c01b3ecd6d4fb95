"""``math_boxed_reward`` and ``math_dapo_reward``: boxed answers checked by math-verify, the
think-format score and DAPO's overlong penalty. Expectations marked "Trinity" are ported from
Trinity-RFT's tests/explorer/workflow_test.py (test_math_boxed_workflow,
test_math_fraction_workflow)."""

from __future__ import annotations

import pytest

from rft_core import rewards
from rft_core.errors import ConfigError
from rft_core.rewards.boxed import answers_equal, overlong_penalty

BOXED_RESPONSES = [
    "<think> balabalabala 99 </think>\n \\boxed{36}",
    "answer is \\boxed{36 }",
    "Kim's total points are 6 + 30 =\\boxed{36}",
    "<think> balalaba </think> \\boxed{35.00}",
]


def boxed(response: str, truth: str, **args) -> dict[str, float]:
    return rewards.score("math_boxed_reward", response, truth, args)


def test_boxed_reward_without_think_scores_accuracy_only():
    # Trinity: with_think False, format_score_coef 0.2 -> rewards 1, 1, 1, 0
    got = [
        sum(boxed(r, "36", with_think=False, format_score_coef=0.2).values())
        for r in BOXED_RESPONSES
    ]
    assert got == [1.0, 1.0, 1.0, 0.0]


def test_boxed_reward_with_think_takes_the_coef_off_responses_without_a_think_block():
    # Trinity: with_think True, coef 0.2 -> 1.0, 0.8, 0.8, 0.0 (the last is wrong but well formed)
    parts = [boxed(r, "36", with_think=True, format_score_coef=0.2) for r in BOXED_RESPONSES]
    assert parts[1] == {"accuracy": 1.0, "format_score": -0.2}
    assert [round(sum(p.values()), 6) for p in parts] == [1.0, 0.8, 0.8, 0.0]


@pytest.mark.parametrize(
    "response",
    [
        "\\boxed{\\frac{40}{400}}",
        "\\boxed{\\frac{1}{10}}",
        "\\boxed{0.1}",
        "\\boxed{0.1000}",
        "\\boxed{\\frac{1} {10}}",
        "The answer is \\boxed{\\frac{40}{400}}",
    ],
)
def test_boxed_fractions_equal_their_value(response):
    # Trinity's test_math_fraction_workflow: every form of 1/10 is right against \frac{40}{400}
    assert boxed(response, "\\frac{40}{400}")["accuracy"] == 1.0


@pytest.mark.parametrize(
    ("response", "truth", "accuracy"),
    [
        ("so \\boxed{72}", "Natalia sold ... #### 72", 1.0),  # GSM8K truth
        ("so \\boxed{72}", "\\boxed{72}", 1.0),  # boxed truth
        ("\\boxed{x+1}", "1+x", 1.0),
        ("\\boxed{\\dfrac{3}{4}}", "0.75", 1.0),
        ("first \\boxed{3} then \\boxed{4}", "4", 1.0),  # the last box counts
        ("first \\boxed{4} then \\boxed{3}", "4", 0.0),
        ("the answer is 36", "36", 0.0),  # no box, no accuracy
        ("\\boxted{36}", "36", 0.0),
        ("\\boxed{36", "36", 0.0),  # unclosed
    ],
)
def test_boxed_reward_reads_the_last_box(response, truth, accuracy):
    assert boxed(response, truth) == {"accuracy": accuracy, "format_score": 0.0}


def test_answers_equal_refuses_empty_and_overlong_answers():
    assert not answers_equal("", "1")
    assert not answers_equal("1+" * 600 + "1", "601")
    assert answers_equal("1+" * 20 + "1", "21")


def test_overlong_penalty_is_dapos_linear_ramp():
    # max 20, cache 4: free below 16 tokens, then (16 - L) / 4 * factor, -factor above 20
    assert overlong_penalty(15, 20, 4, 1.0) == 0.0
    assert overlong_penalty(16, 20, 4, 1.0) == 0.0
    assert overlong_penalty(18, 20, 4, 1.0) == -0.5
    assert overlong_penalty(20, 20, 4, 2.0) == -2.0
    assert overlong_penalty(21, 20, 4, 1.0) == -1.0


def test_dapo_reward_takes_the_answer_after_think_and_penalises_length():
    args = {
        "enable_overlong_penalty": True,
        "penalty_factor": 1.0,
        "max_response_length": 20,
        "cache_length": 4,
    }
    response = "<think>maybe \\boxed{5}</think> so \\boxed{6}"
    assert rewards.score("math_dapo_reward", response, "6", args, response_length=10) == {
        "accuracy": 1.0,
        "format_score": 0.0,
    }
    assert rewards.score("math_dapo_reward", response, "6", args, response_length=19) == {
        "accuracy": 1.0,
        "format_score": -0.75,
    }
    # no box after </think>: the whole remainder is the answer
    assert rewards.score("math_dapo_reward", "<think>x</think> 6", "6")["accuracy"] == 1.0
    assert rewards.score("math_dapo_reward", "<think>\\boxed{6}</think> 7", "6")["accuracy"] == 0.0


def test_dapo_overlong_penalty_needs_its_three_settings():
    with pytest.raises(ConfigError, match="max_response_length, cache_length and penalty_factor"):
        rewards.score(
            "math_dapo_reward",
            "\\boxed{1}",
            "1",
            {"enable_overlong_penalty": True},
            response_length=3,
        )


def test_response_length_is_filled_in_not_a_reward_fn_arg():
    with pytest.raises(ConfigError, match="takes no argument 'response_length'"):
        rewards.check_args("math_dapo_reward", {"response_length": 3})
