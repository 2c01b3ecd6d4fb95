"""Reward functions and their registry."""

from __future__ import annotations

import pytest

from rft_core import rewards
from rft_core.errors import ConfigError, RFTError
from rft_core.rewards.math import extract_answer, extract_truth, parse_number

GOOD = "<think>48 / 2 = 24, 48 + 24 = 72</think>\n<answer>72</answer>"
GSM8K_TRUTH = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n48+24 = <<48+24=72>>72\n#### 72"


def math_reward(response: str, truth: str) -> dict[str, float]:
    return rewards.get("math_reward")(response, truth)


def test_gsm8k_truth_and_think_answer_format():
    # correct + well formed: 1 + 0.1
    assert math_reward(GOOD, GSM8K_TRUTH) == {"accuracy": 1.0, "format_score": 0.1}
    # wrong but well formed: 0 + 0.1
    assert math_reward(GOOD.replace("72</answer>", "70</answer>"), GSM8K_TRUTH) == {
        "accuracy": 0.0,
        "format_score": 0.1,
    }


@pytest.mark.parametrize(
    ("response", "truth"),
    [
        ("<think>..</think><answer>1,200</answer>", "so the total is #### 1,200"),
        ("<think>..</think><answer>1200</answer>", "#### 1,200"),
        ("<think>..</think><answer>$1,200.00</answer>", "#### 1200"),
        ("The answer is \\boxed{72}.", "#### 72"),
        ("<answer>72.0</answer>", "72"),
        ("<answer>72</answer>", "\\boxed{72}"),
        ("<answer>\\frac{3}{4}</answer>", "0.75"),
        ("<answer>3/4</answer>", "\\boxed{\\dfrac{3}{4}}"),
        ("<answer>-5</answer>", "#### -5"),
        ("<answer>She has 18 apples left.</answer>", "#### 18"),
        ("so 5 + 3 = 8", "#### 8"),  # no tags: the last number of the whole response
        ("<answer>2^10</answer>", "1024"),
        ("<answer>50%</answer>", "#### 50"),
        ("<answer>0.333333</answer>", "\\frac{1}{3}"),  # a fraction as a rounded decimal
    ],
)
def test_answers_that_match(response, truth):
    assert math_reward(response, truth)["accuracy"] == 1.0


@pytest.mark.parametrize(
    ("response", "truth"),
    [
        ("", "#### 5"),  # answer missing
        ("<think>no idea</think><answer></answer>", "#### 5"),  # empty answer block
        ("<think>hmm</think>", "#### 5"),  # no number at all
        ("<answer>12</answer>", "#### 1,200"),  # "1,200" is not 12
        ("<answer>1/0</answer>", "#### 1"),  # division by zero is not a number
        ("<answer>7</answer> I changed my mind: 8", "#### 8"),  # the answer block wins
        ("<answer>0.333</answer>", "\\frac{1}{3}"),
        ("<answer>1234568</answer>", "#### 1234567"),  # a whole number must be exact
        ("<answer>1000000.5</answer>", "#### 1000000"),
    ],
)
def test_answers_that_do_not_match(response, truth):
    assert math_reward(response, truth)["accuracy"] == 0.0


@pytest.mark.parametrize(
    ("response", "score"),
    [
        (GOOD, 0.1),
        ("  <think>a</think>  <answer>b</answer>\n", 0.1),  # whitespace allowed
        ("<answer>72</answer>", -0.1),  # no think block
        ("<answer>72</answer><think>a</think>", -0.1),  # wrong order
        ("<think>a</think><answer>72</answer> and more", -0.1),  # trailing text
        ("Sure! <think>a</think><answer>72</answer>", -0.1),  # leading text
        ("<think>a</think><answer>1</answer><answer>2</answer>", -0.1),  # two answers
        ("72", -0.1),
    ],
)
def test_format_score_signs(response, score):
    assert rewards.get("format_reward")(response, "")["format_score"] == score
    assert math_reward(response, "#### 72")["format_score"] == score


def test_accuracy_reward_has_only_accuracy():
    assert rewards.get("accuracy_reward")(GOOD, GSM8K_TRUTH) == {"accuracy": 1.0}


def test_format_score_coefficient_is_an_argument():
    assert rewards.get("math_reward")(GOOD, "#### 1", format_score_coef=0.5) == {
        "accuracy": 0.0,
        "format_score": 0.5,
    }


def test_parsing_helpers():
    assert extract_truth(GSM8K_TRUTH) == "72"
    assert extract_truth("\\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert extract_answer("<answer> 1 </answer> x <answer> 2 </answer>") == "2"
    assert parse_number("1,234,567") == 1234567
    assert parse_number("(2 + 3) * 4 - 1") == 19
    assert parse_number("-\\frac{1}{2}") == parse_number("-0.5")
    assert parse_number("__import__('os')") is None
    assert parse_number("2^1000") is None  # exponent too large to be an answer


def test_registry_lists_names_and_rejects_duplicates():
    assert {"math_reward", "accuracy_reward", "format_reward"} <= set(rewards.names())
    with pytest.raises(ConfigError) as err:
        rewards.get("math_rewad")
    message = str(err.value)
    assert "did you mean 'math_reward'" in message
    assert "accuracy_reward" in message and "format_reward" in message
    with pytest.raises(RFTError, match="already registered"):
        rewards.register("math_reward")(lambda response, truth: {"x": 1.0})


def test_user_reward_fn_registration_and_checks():
    @rewards.register("test_length_penalty")
    def length_penalty(response: str, truth: str, *, per_char: float = 0.01) -> dict[str, float]:
        return {"length_penalty": -per_char * len(response)}

    assert rewards.score("test_length_penalty", "abcd", None, {"per_char": 0.5}) == {
        "length_penalty": -2.0
    }
    rewards.check_args("test_length_penalty", {"per_char": 1.0})
    with pytest.raises(ConfigError) as err:
        rewards.check_args("test_length_penalty", {"per_chr": 1.0}, path="x.reward_fn_args")
    assert err.value.path == "x.reward_fn_args.per_chr" and "per_char" in str(err.value)

    @rewards.register("test_bad_reward")
    def bad(response: str, truth: str) -> dict[str, float]:
        return {"score": float("nan")}

    with pytest.raises(RFTError, match="finite number"):
        rewards.score("test_bad_reward", "x", "y")
