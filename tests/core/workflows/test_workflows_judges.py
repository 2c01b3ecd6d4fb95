"""The LLM-judge workflows (math_ruler, medicine_ruler, rubric_judge, math_trainable_ruler,
learn2ask) and rlcr_reward: their parsers and reward formulas on hand-worked replies, and the
workflows end to end with a scripted judge (the replies are the point: the tiny demo model's
replies are junk) and once with the real tiny model as judge through the ``hf`` engine (every
reply then fails to parse: the fallback and its metric, never an exception).

The scripted engines are test doubles of a rollout engine (``ScriptedEngine`` of
test_workflows, and ``FnEngine`` here, which answers through a function of the conversation);
nothing else is faked."""

from __future__ import annotations

import logging

import pytest
from workflow_engines import ScriptedEngine, demo_judge
from workflow_engines import task as _task

from rft_core import workflows
from rft_core.errors import ConfigError
from rft_core.rewards import score
from rft_core.rollout.base import AuxiliaryModel, Generation, SamplingParams
from rft_core.workflows.learn2ask import STOP, fuse, parse_judge_tags
from rft_core.workflows.rubric_judge import parse_rating
from rft_core.workflows.ruler import parse_ruler_scores
from rft_core.workflows.ruler_trainable import judge_reward, mean_scores


class FnEngine:
    """Answers each conversation with ``reply(conversation)`` (n copies)."""

    def __init__(self, reply) -> None:
        self.reply = reply
        self.model_version = 0
        self.calls: list[tuple[list, SamplingParams]] = []

    def chat(self, conversations, params):
        self.calls.append((conversations, params))
        out = []
        for conv in conversations:
            text = self.reply(conv)
            out.append([Generation([1], [2, 3], [-0.1, -0.2], text, "stop")] * params.n)
        return out


def task(index, prompt, truth, raw=None, **kw):
    made = _task(index, prompt, truth, **kw)
    made.raw = dict(raw or {})
    return made


def aux(reply) -> AuxiliaryModel:
    return AuxiliaryModel(FnEngine(reply), SamplingParams(temperature=0.0, max_tokens=64), "judge")


# -- parsers and formulas, by hand ------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "n", "scores"),
    [
        ("Solution 2 is best. [0.2, 0.9, 0.5]", 3, [0.2, 0.9, 0.5]),
        ("first [1, 1, 1] then, final: [0.1,0.2,0.3]", 3, [0.1, 0.2, 0.3]),  # the last list
        ("[1.5, -0.2]", 2, [1.0, 0.0]),  # clipped to [0, 1]
        ("[.5, 1e-1]", 2, [0.5, 0.1]),
        ("[0.2, 0.9]", 3, None),  # wrong length
        ("[0.2, good, 0.5]", 3, None),  # a word in the list
        ("[__import__('os'), 1]", 2, None),  # nothing is evaluated
        ("scores: 0.2, 0.9", 2, None),  # no list
        ("] 0.2, 0.9 [", 2, None),  # brackets the wrong way round
        ("", 1, None),
    ],
)
def test_ruler_scores_parse(reply, n, scores):
    assert parse_ruler_scores(reply, n) == scores


@pytest.mark.parametrize(
    ("reply", "rating"),
    [
        ('```json\n{"rating": 7}\n```', 7.0),
        ('Sure. ```json {"rating": 10} ``` done', 10.0),
        ('```\n{"rating": 1}\n```', 1.0),  # a plain fence is read too
        ('```json\n{"rating": 11}\n```', None),  # out of range
        ('```json\n{"rating": "7"}\n```', None),  # not a number
        ('```json\n{"score": 7}\n```', None),
        ('```json\n{"rating": 7\n```', None),  # bad JSON
        ('{"rating": 7}', None),  # no fence
        ('```json\n{"rating": true}\n```', None),
    ],
)
def test_rubric_rating_parse(reply, rating):
    assert parse_rating(reply) == rating


def test_learn2ask_tags_and_fusion_by_hand():
    reply = "<think>one question</think><format_score>1.0</format_score><content_score>0.5</content_score>"
    assert parse_judge_tags(reply) == (1.0, 0.5)
    assert parse_judge_tags("<format_score>1</format_score>") is None  # content missing
    assert (
        parse_judge_tags("<format_score>x</format_score><content_score>1</content_score>") is None
    )
    # action 1, content 0.5, format 1: default 1*(1+2*0.5)+1 = 3; sum 1+0.5+1 = 2.5;
    # Ra: 2*0.5+1 = 2; Rs: 3*1+1 = 4
    assert fuse(1.0, 0.5, 1.0, "Ra+Rs", "default") == 3.0
    assert fuse(1.0, 0.5, 1.0, "Ra+Rs", "sum") == 2.5
    assert fuse(1.0, 0.5, 1.0, "Ra", "default") == 2.0
    assert fuse(1.0, 0.5, 1.0, "Rs", "default") == 4.0
    assert fuse(0.0, 0.0, 0.0, "Ra+Rs", "default") == 0.0


def test_trainable_ruler_formulas_by_hand():
    # gold rewards 1.1 and -0.1 scale to (1.1+0.1)/1.2 = 1 and 0; scores [0.8, 0.2] miss by
    # 0.2 each: reward 1 - 0.2 = 0.8
    assert judge_reward([0.8, 0.2], [1.0, 0.0]) == pytest.approx(0.8)
    assert judge_reward(None, [1.0, 0.0]) == 0.0
    # two usable judgements [0.2, 1.0] and [0.4, 0.0] -> means [0.3, 0.5]; the failed one is
    # left out; none usable -> the fallback
    assert mean_scores([[0.2, 1.0], None, [0.4, 0.0]], 2, 0.0) == pytest.approx([0.3, 0.5])
    assert mean_scores([None], 2, 0.25) == [0.25, 0.25]


CHAIN = "<think>t</think> <answer>{a}</answer>\n<analysis>x</analysis> <confidence>{q}</confidence>"


@pytest.mark.parametrize(
    ("response", "truth", "parts"),
    [
        # right, q = 0.8: format 0.5*1, accuracy 0.5*1, brier 0.5*(1-(1-0.8)^2) = 0.48,
        # mean_confidence 1e-5*0.8, extreme 0
        (CHAIN.format(a="72", q="0.8"), "#### 72", (0.5, 0.5, 0.48, 0.8e-5, 0.0)),
        # wrong, q = 0.8: brier 0.5*(1-0.8^2) = 0.18
        (CHAIN.format(a="70", q="0.8"), "#### 72", (0.5, 0.0, 0.18, 0.8e-5, 0.0)),
        # wrong and sure (q = 1): brier 0.5*(1-1) = 0; q > 0.99 counts as extreme
        (CHAIN.format(a="70", q="1"), "72", (0.5, 0.0, 0.0, 1e-5, 1e-5)),
        # right and q = 0: brier 0.5*(1-1) = 0; q < 0.01 extreme
        (CHAIN.format(a="72", q="0"), "72", (0.5, 0.5, 0.0, 0.0, 1e-5)),
        # trailing text after </confidence>: no chain, but the confidence is still read
        (CHAIN.format(a="72", q="0.5") + " ok", "72", (0.0, 0.0, 0.0, 0.5e-5, 0.0)),
        # tags out of order: no chain
        (
            "<answer>72</answer><think>t</think><analysis>x</analysis><confidence>0.5</confidence>",
            "72",
            (0.0, 0.0, 0.0, 0.5e-5, 0.0),
        ),
        # confidence out of range: no chain, no confidence
        (CHAIN.format(a="72", q="1.5"), "72", (0.0, 0.0, 0.0, 0.0, 0.0)),
        # nested confidence tags: nothing read
        (
            "<think>t</think><answer>72</answer><analysis>x</analysis>"
            "<confidence><confidence>0.5</confidence></confidence>",
            "72",
            (0.0, 0.0, 0.0, 0.0, 0.0),
        ),
    ],
)
def test_rlcr_reward_by_hand(response, truth, parts):
    got = score("rlcr_reward", response, truth)
    names = ("format", "accuracy", "brier", "mean_confidence", "confidence_one_or_zero")
    assert tuple(got) == names
    assert [got[n] for n in names] == pytest.approx(list(parts))


def test_rlcr_weights_replace_the_defaults():
    weights = {
        "format": 0,
        "accuracy": 1,
        "brier": 2,
        "mean_confidence": 0,
        "confidence_one_or_zero": 0,
    }
    # right, q = 0.5: accuracy 1*1, brier 2*(1-0.25) = 1.5
    got = score("rlcr_reward", CHAIN.format(a="3", q="0.5"), "3", {"weights": weights})
    assert (got["accuracy"], got["brier"], got["format"]) == (1.0, 1.5, 0.0)


# -- the workflows with a scripted judge ------------------------------------------------------


def test_math_ruler_rewards_are_the_judges_scores_and_gold_is_logged(caplog):
    policy = ScriptedEngine(
        {
            "q0": ["<think>a</think><answer>72</answer>", "<think>b</think><answer>70</answer>"],
            "q1": ["<answer>5</answer>", "<answer>6</answer>"],
        }
    )

    def reply(conv):  # q0: a usable list; q1: no list
        return (
            "I prefer the first. [0.9, 0.1]"
            if "Question: q0" in conv[-1]["content"]
            else "both fine"
        )

    judge = aux(reply)
    workflow = workflows.get("math_ruler_workflow")({}, auxiliary_models=[judge])
    with caplog.at_level(logging.WARNING):
        exps = workflow.run_batch([task(0, "q0", "#### 72"), task(1, "q1", "5")], policy, 2)
    # one judge call for the whole batch, one conversation per group, all responses in it
    assert len(judge.engine.calls) == 1
    conversations, params = judge.engine.calls[0]
    assert len(conversations) == 2 and params.n == 1 and params.temperature == 0.0
    user = conversations[0][-1]["content"]
    assert "Candidate solution 1: <think>a</think><answer>72</answer>" in user
    assert "Candidate solution 2: <think>b</think><answer>70</answer>" in user
    assert "[score of solution 1, ..., score of solution 2]" in user
    assert [e.reward for e in exps] == [0.9, 0.1, 0.0, 0.0]  # q1 falls back to 0.0
    assert [e.metrics["judge_success"] for e in exps] == [1.0, 1.0, 0.0, 0.0]
    # gold: math_reward = accuracy 1 + format 0.1 for the right, well formed answer
    assert exps[0].metrics["gold_reward"] == pytest.approx(1.1)
    assert exps[1].metrics["gold_reward"] == pytest.approx(0.1)
    assert exps[2].info["judge_reply"] == "both fine" and not exps[2].info["judge_parsed"]
    # one warning, for the group whose reply failed (gsm[1]), naming the task and the reply
    warned = [r.getMessage() for r in caplog.records if r.name == "rft_core.workflows.ruler"]
    assert warned == [
        "math_ruler_workflow: judge reply for task gsm[1] holds no usable scores, "
        "fallback used: 'both fine'"
    ]


def test_math_ruler_logs_whether_the_judge_called_each_answer_as_the_truth_does():
    policy = ScriptedEngine(
        {"q0": ["<answer>72</answer>", "<answer>70</answer>", "<answer>72</answer>"]}
    )
    # right answer scored 0.9 (agrees), wrong one 0.6 (disagrees), right one 0.2 (disagrees)
    judge = aux(lambda conv: "[0.9, 0.6, 0.2]")
    template = {"judge_prompt": "{question}\n{answers}\nScores:"}
    workflow = workflows.get("math_ruler_workflow")(template, auxiliary_models=[judge])
    exps = workflow.run_batch([task(0, "q0", "#### 72")], policy, 3)
    assert judge.engine.calls[0][0][0] == [
        {"role": "user", "content": "q0\n1: 72\n2: 70\n3: 72\nScores:"}
    ]
    assert [e.metrics["judge_agreement"] for e in exps] == [1.0, 0.0, 0.0]
    unparsed = workflows.get("math_ruler_workflow")({}, auxiliary_models=[aux(lambda c: "no")])
    exps = unparsed.run_batch([task(0, "q0", "#### 72")], policy, 3)
    assert all("judge_agreement" not in e.metrics for e in exps)  # no judgement, no agreement


def test_math_ruler_without_a_judge_is_one_clear_error():
    policy = ScriptedEngine({"q0": ["a"]})
    with pytest.raises(ConfigError, match="explorer.auxiliary_models"):
        workflows.get("math_ruler_workflow")({}).run_batch([task(0, "q0", "1")], policy, 1)


def test_medicine_ruler_shows_the_rubric_and_runs_no_reward_function():
    policy = ScriptedEngine({"q": ["take rest", "see a doctor"]})
    judge = aux(lambda conv: "[0.25, 0.75]")
    row = task(0, "q", "rest", raw={"rubric": [{"description": "mentions rest", "weight": 2}]})
    exps = workflows.get("medicine_ruler_workflow")({}, auxiliary_models=[judge]).run_batch(
        [row], policy, 2
    )
    user = judge.engine.calls[0][0][0][-1]["content"]
    assert "Rubric 0 (weight: 2): mentions rest" in user
    assert [e.reward for e in exps] == [0.25, 0.75]
    assert "gold_reward" not in exps[0].metrics


def test_rubric_judge_rates_each_response_alone():
    policy = ScriptedEngine({"q": ["good", "bad", "odd"]})
    ratings = {"good": '```json\n{"rating": 10}\n```', "bad": '```json\n{"rating": 4}\n```'}

    def reply(conv):
        response = conv[-1]["content"].split("<response>\n")[1].split("\n</response>")[0]
        return ratings.get(response, "no idea")

    judge = aux(reply)
    row = task(0, "q", None, raw={"rubric": [{"description": "is good", "weight": 1}]})
    exps = workflows.get("rubric_judge_workflow")({}, auxiliary_models=[judge]).run_batch(
        [row], policy, 3
    )
    assert len(judge.engine.calls[0][0]) == 3  # one conversation per response, one call
    # (10-1)/9 = 1, (4-1)/9 = 1/3, unparsed -> 0 with judge_success 0
    assert [e.reward for e in exps] == pytest.approx([1.0, 1 / 3, 0.0])
    assert [e.metrics["judge_success"] for e in exps] == [1.0, 1.0, 0.0]


def test_learn2ask_rewards_by_decision_and_judge():
    dialogue = [{"role": "user", "content": "I have a sore throat"}]
    replies = ["Do you have a fever, yes or no?", STOP, "Any cough? Any pain?"]
    policy = FnEngine(lambda conv: "")
    policy.chat = lambda convs, params: [
        [Generation([1], [2], [-0.1], r, "stop") for r in replies] for _ in convs
    ]

    def judge_reply(conv):
        assert conv[0]["content"].count("fever duration") == 1  # info_truth is the reference
        if "Any cough? Any pain?" in conv[-1]["content"]:
            return "<format_score>0.5</format_score><content_score>0.0</content_score>"
        return "<format_score>1.0</format_score><content_score>1.0</content_score>"

    judge = aux(judge_reply)
    cont = task(0, str(dialogue), None, raw={"messages": dialogue, "info_truth": "fever duration"})
    stop = task(1, str(dialogue), None, raw={"messages": dialogue, "decision_truth": "stop"})
    exps = workflows.get("learn2ask_workflow")({}, auxiliary_models=[judge]).run_batch(
        [cont, stop], policy, 3
    )
    # the judge reads only the two "continue" replies of the "continue" task
    assert len(judge.engine.calls[0][0]) == 2
    assert (
        "patient: I have a sore throat\ndoctor: Do you have a fever"
        in (judge.engine.calls[0][0][0][-1]["content"])
    )
    # continue task: question -> 1*(1+2*1)+1 = 4; <stop /> -> wrong decision 0;
    # two questions -> 1*(1+2*0)+0.5 = 1.5
    # stop task: questions -> 0; exactly <stop /> -> 1*(1+2*1)+1 = 4
    assert [e.reward for e in exps] == [4.0, 0.0, 1.5, 0.0, 4.0, 0.0]


def test_trainable_ruler_trains_the_judge_when_the_truth_counts():
    answers = ["<think>a</think><answer>72</answer>", "<think>b</think><answer>70</answer>"]
    judgements = iter(["[1.0, 0.0]", "[0.5, 0.5]", "no list"])

    def reply(conv):
        return answers if conv[-1]["content"] == "q0" else None

    policy = FnEngine(lambda conv: "")

    def chat(convs, params):
        out = []
        for conv in convs:
            if conv[-1]["content"] == "q0":
                texts = answers[: params.n]
            else:
                texts = [next(judgements) for _ in range(params.n)]
            out.append([Generation([1], [2], [-0.1], t, "stop") for t in texts])
        return out

    policy.chat = chat
    workflow = workflows.get("math_trainable_ruler_workflow")({"gold_probability": 1.0})
    exps = workflow.run_batch([task(0, "q0", "#### 72")], policy, 2)
    # 2 answers on their gold reward (1.1 and 0.1), then 2 judgements in their own group
    assert [e.group_id for e in exps] == ["gsm:0", "gsm:0", "gsm:0-ruler", "gsm:0-ruler"]
    assert [e.reward for e in exps[:2]] == pytest.approx([1.1, 0.1])
    # gold scaled: (1.1+0.1)/1.2 = 1, (0.1+0.1)/1.2 = 1/6; [1, 0] misses by 0 and 1/6:
    # 1 - (1/6)/2 = 11/12; [0.5, 0.5] misses by 0.5 and 1/3: 1 - (5/6)/2 = 7/12
    assert [e.reward for e in exps[2:]] == pytest.approx([11 / 12, 7 / 12])
    assert exps[0].metrics["ruler_score"] == pytest.approx(0.75)  # mean of 1.0 and 0.5

    judgements = iter(["no list"])
    workflow = workflows.get("math_trainable_ruler_workflow")({"gold_probability": 0.0})
    exps = workflow.run_batch([task(0, "q0", "#### 72")], policy, 2)
    # judged once, unusable: the answers get the fallback 0.0, no judge experience
    assert [e.reward for e in exps] == [0.0, 0.0]
    assert [e.metrics["judge_success"] for e in exps] == [0.0, 0.0]


# -- the real tiny model as judge (hf engine) -------------------------------------------------


@pytest.fixture(scope="module")
def tiny_judge(tmp_path_factory):
    return demo_judge(tmp_path_factory.mktemp("judge"), max_prompt_tokens=2000)


def test_math_ruler_with_the_tiny_model_as_judge_falls_back_without_crashing(tiny_judge):
    policy = ScriptedEngine({"1+2=?": ["<answer>3</answer>", "<answer>4</answer>"]})
    short = {"judge_prompt": "Q:{question}\n{solutions}\nscores:", "fallback_score": 0.5}
    workflow = workflows.get("math_ruler_workflow")(short, auxiliary_models=[tiny_judge])
    exps = workflow.run_batch([task(0, "1+2=?", "3")], policy, 2)
    assert len(exps) == 2
    for exp in exps:  # the untrained model writes no score list: the defined fallback
        assert parse_ruler_scores(exp.info["judge_reply"], 2) is None
        assert (exp.reward, exp.metrics["judge_success"]) == (0.5, 0.0)
