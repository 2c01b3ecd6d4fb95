"""``countdown_reward``: Trinity-RFT's (TinyZero's) Countdown scores, 1.0 / 0.1 / 0.0."""

from __future__ import annotations

import json

import pytest

from rft_core import rewards
from rft_core.errors import RFTError

TRUTH = json.dumps({"target": 24, "numbers": [4, 6, 1, 3]})


def score(response: str, truth: str = TRUTH) -> float:
    return rewards.score("countdown_reward", response, truth)["score"]


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<think>4*6=24, 3-1... </think>\n<answer>4 * 6 * (3 - 1 - 1)</answer>", 0.1),  # 1 twice
        ("<think>..</think>\n<answer>(4 * 6) * (3 - 1) / 2</answer>", 0.1),  # 2 is not given
        ("<think>..</think>\n<answer>6 / (1 - 3 / 4)</answer>", 1.0),  # exact: 6 / 0.25
        ("<think>..</think>\n<answer>4 * 6 * 1 ** 3</answer>", 0.1),  # ** is not arithmetic here
        ("<think>..</think>\n<answer>(3 - 1) * 6 + 4</answer>", 0.1),  # right numbers, 16
        ("<think>..</think>\n<answer>4 * 6 / (3 - 3 * 1)</answer>", 0.1),  # 3 twice
        ("<think>..</think>\n<answer>6 * 4 / (1 * 1 - 1)</answer>", 0.1),
        ("<think>..</think>\n<answer>4 * 6 * 1 * (3 - 3)</answer>", 0.1),
        ("<think>..</think>\n<answer>6 / (3 - 3) + 4 + 1</answer>", 0.1),
        ("<answer>4 * 6</answer> and then more text\n", 0.0),  # last line has no answer
        ("no answer at all", 0.0),
        ("<answer>4 + 6 + 1 + 3 = 14</answer>", 0.1),  # '=' is not allowed in the equation
        ("<answer>import os</answer>", 0.1),
    ],
)
def test_countdown_scores(response, expected):
    assert score(response) == expected


def test_each_number_used_once_reaching_the_target_scores_one():
    # (4 + 1 + 3) * 6 = 48; with target 48 it is right, with 24 only the format counts
    response = "<think>try</think>\n<answer>(4 + 1 + 3) * 6</answer>"
    assert score(response, json.dumps({"target": 48, "numbers": [4, 6, 1, 3]})) == 1.0
    assert score(response) == 0.1


def test_division_by_zero_is_a_wrong_answer_not_a_crash():
    assert score("<answer>6 / (4 - 3 - 1)</answer>") == 0.1


def test_the_last_answer_on_the_last_line_counts():
    assert score("<answer>1</answer> <answer>6 / (1 - 3 / 4)</answer>") == 1.0


def test_a_truth_that_is_not_countdown_json_names_the_format():
    with pytest.raises(RFTError, match='"target": <int>, "numbers"'):
        score("<answer>1</answer>", "24")
