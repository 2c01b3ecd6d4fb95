"""Workflows: prompts, batching, scoring, grouping, per-row overrides and explorer metrics.

``ScriptedEngine`` (``workflow_engines``) is a tiny RolloutEngine that answers from a script: it
exercises the workflow's own logic (which prompt, how many calls, which reward, which group). The
last test runs the same workflow on the real ``hf`` engine with a tiny random model.
"""

from __future__ import annotations

import pytest
from tiny_lm import build_tiny_model
from workflow_engines import ScriptedEngine, task

from rft_core import workflows
from rft_core.errors import ConfigError
from rft_core.workflows.math import THINK_ANSWER_SYSTEM_PROMPT

GOOD_72 = "<think>48/2=24, 48+24=72</think><answer>72</answer>"


REPLIES = {
    "q0": [GOOD_72, "<think>x</think><answer>70</answer>", "72"],
    "q1": ["<think>a</think><answer>1200</answer>", "", "so \\boxed{1,200}"],
}


def run_math(tasks, replies=REPLIES, repeat_times=3):
    engine = ScriptedEngine(replies)
    exps = workflows.get("math_workflow")({}).run_batch(tasks, engine, repeat_times)
    return engine, exps


def test_math_workflow_scores_groups_and_batches_in_one_call():
    engine, exps = run_math([task(0, "q0", "#### 72"), task(1, "q1", "text #### 1,200")])
    # one engine call for both tasks; n = repeat_times (rollout_args.n is ignored); the task's
    # temperature/max_tokens are used and unset (None) keys keep the defaults
    assert len(engine.calls) == 1
    conversations, params = engine.calls[0]
    assert (params.n, params.temperature, params.max_tokens, params.top_p) == (3, 0.7, 40, 1.0)
    assert conversations[0] == [
        {"role": "system", "content": THINK_ANSWER_SYSTEM_PROMPT},
        {"role": "user", "content": "q0"},
    ]
    # accuracy + format: 1 + 0.1, 0 + 0.1, 1 - 0.1 | 1 + 0.1, 0 - 0.1, 1 - 0.1
    assert [e.reward for e in exps] == pytest.approx([1.1, 0.1, 0.9, 1.1, -0.1, 0.9])
    assert [e.metrics["accuracy"] for e in exps] == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    assert [e.group_id for e in exps] == ["gsm:0"] * 3 + ["gsm:1"] * 3
    first = exps[0]
    assert first.response_text == GOOD_72 and first.model_version == 3
    assert first.logprobs == [-0.5] * len(GOOD_72) and first.prompt_ids == [1, 2, 3]
    assert first.info["reward_fn"] == "math_reward"
    # the script cuts at max_tokens 40: GOOD_72 (52 chars) ends by "length", "72" by "stop"
    assert exps[0].truncated and exps[0].info["finish_reason"] == "length"
    assert not exps[2].truncated and exps[2].info["finish_reason"] == "stop"


def test_system_prompt_from_taskset_or_none():
    engine, _ = run_math([task(0, "q0", "72", system_prompt="Be brief.")])
    assert engine.calls[0][0][0][0] == {"role": "system", "content": "Be brief."}
    engine, _ = run_math([task(0, "q0", "72", system_prompt="")])
    assert engine.calls[0][0][0] == [{"role": "user", "content": "q0"}]


def test_per_row_reward_override_and_sampling_groups():
    tasks = [
        task(0, "q0", "#### 72"),
        task(1, "q1", "#### 1200", reward_fn="accuracy_reward", rollout_args={"temperature": 0}),
    ]
    engine, exps = run_math(tasks)
    # different sampling settings -> one call each, results still in task order
    assert [p.temperature for _, p in engine.calls] == [0.7, 0]
    assert set(exps[0].metrics) == {"accuracy", "format_score"}
    assert [e.metrics for e in exps[3:]] == [
        {"accuracy": 1.0},
        {"accuracy": 0.0},
        {"accuracy": 1.0},
    ]
    assert [e.reward for e in exps[3:]] == [1.0, 0.0, 1.0]


def test_repeated_task_gets_its_own_group():
    _, exps = run_math([task(0, "q0", "72"), task(0, "q0", "72")], repeat_times=1)
    assert [e.group_id for e in exps] == ["gsm:0", "gsm:0#2"]


def test_simple_workflow_needs_a_reward_fn_before_generating():
    engine = ScriptedEngine(REPLIES)
    simple = workflows.get("simple_workflow")({})
    with pytest.raises(ConfigError) as err:
        simple.run_batch([task(0, "q0", "72")], engine, 2)
    assert err.value.path == "buffer.explorer_input.taskset.default_reward_fn_type"
    assert "math_reward" in str(err.value) and "gsm[0]" in str(err.value)
    assert engine.calls == []  # failed before any generation
    exps = simple.run_batch([task(0, "q0", "#### 72", reward_fn="accuracy_reward")], engine, 2)
    assert engine.calls[0][0][0] == [{"role": "user", "content": "q0"}]
    assert [e.metrics for e in exps] == [{"accuracy": 1.0}, {"accuracy": 0.0}]


def test_unknown_names_list_the_registered_ones():
    with pytest.raises(ConfigError) as err:
        workflows.get("math_wrkflow")
    assert "did you mean 'math_workflow'" in str(err.value)
    assert "simple_workflow" in str(err.value)
    with pytest.raises(ConfigError) as err:
        ev = "buffer.explorer_input.eval_tasksets[0]"
        run_math([task(7, "q0", "72", reward_fn="nope", is_eval=True, yaml_path=ev)])
    message = str(err.value)
    assert err.value.path == "buffer.explorer_input.eval_tasksets[0].default_reward_fn_type"
    assert "'nope'" in message and "math_reward" in message and "gsm[7]" in message


def test_unknown_reward_fn_args_are_rejected():
    with pytest.raises(ConfigError) as err:
        run_math([task(0, "q0", "72", reward_fn_args={"format_coef": 0.2})])
    assert err.value.path == "buffer.explorer_input.taskset.reward_fn_args.format_coef"
    _, exps = run_math([task(0, "q0", "72", reward_fn_args={"format_score_coef": 0.5})])
    assert exps[0].metrics == {"accuracy": 1.0, "format_score": 0.5}


def test_duplicate_workflow_registration_is_an_error():
    from rft_core.errors import RFTError

    with pytest.raises(RFTError, match="already registered"):
        workflows.register("math_workflow")(type("Other", (workflows.Workflow,), {}))


def test_rollout_metrics():
    _, exps = run_math([task(0, "q0", "#### 72"), task(1, "q1", "#### 1200")])
    m = workflows.rollout_metrics(exps)
    # accuracy [1, 0, 1, 1, 0, 1]; format [.1, .1, -.1, .1, -.1, -.1];
    # reward [1.1, .1, .9, 1.1, -.1, .9] -> mean 4.0 / 6
    assert m["rollout/accuracy/mean"] == pytest.approx(4 / 6)
    assert (m["rollout/accuracy/max"], m["rollout/accuracy/min"]) == (1.0, 0.0)
    assert m["rollout/format_score/mean"] == pytest.approx(0.0)
    assert m["rollout/reward/mean"] == pytest.approx(4.0 / 6)
    assert m["rollout/reward/min"] == pytest.approx(-0.1)
    lengths = [len(t) for t in REPLIES["q0"] + REPLIES["q1"]]
    assert m["response_length/mean"] == pytest.approx(sum(lengths) / 6)
    assert (m["response_length/max"], m["response_length/min"]) == (max(lengths), 0)
    # replies of >= 40 characters count as clipped: GOOD_72 (52 chars) only
    assert m["response_length/clip_ratio"] == pytest.approx(sum(n >= 40 for n in lengths) / 6)
    assert workflows.rollout_metrics([]) == {}


def test_eval_metrics_mean_std_pass_at_k():
    replies = {
        "a": [GOOD_72, "<answer>1</answer>", "72", "<answer>72</answer>"],
        "b": ["<answer>0</answer>"] * 4,
    }
    tasks = [task(0, "a", "72", is_eval=True), task(1, "b", "72", is_eval=True)]
    _, exps = run_math(tasks, replies, repeat_times=4)
    m = workflows.eval_metrics(exps, "gsm_test", 4)
    # task a accuracy [1, 0, 1, 1]: mean .75, population std sqrt(.75/4) = .4330127
    # task b [0, 0, 0, 0]: mean 0, std 0 -> mean@4 .375, std@4 .2165064, pass@4 (1 + 0)/2
    assert m["eval/gsm_test/accuracy/mean@4"] == pytest.approx(0.375)
    assert m["eval/gsm_test/accuracy/std@4"] == pytest.approx(0.2165064)
    assert m["eval/gsm_test/accuracy/pass@4"] == 0.5
    # format_score is not 0/1 -> no pass@k; a: [.1, -.1, -.1, -.1] mean -.05; b: -.1
    assert "eval/gsm_test/format_score/pass@4" not in m
    assert m["eval/gsm_test/format_score/mean@4"] == pytest.approx(-0.075)
    # k = 2 uses the first two responses: a [1, 0] mean .5 std .5; b [0, 0]
    m2 = workflows.eval_metrics(exps, "gsm_test", 2)
    assert m2["eval/gsm_test/accuracy/mean@2"] == pytest.approx(0.25)
    assert m2["eval/gsm_test/accuracy/std@2"] == pytest.approx(0.25)
    # k = 1: mean@1 only
    m1 = workflows.eval_metrics(exps, "gsm_test", 1)
    assert m1["eval/gsm_test/accuracy/mean@1"] == 0.5
    assert "eval/gsm_test/accuracy/std@1" not in m1


def test_math_workflow_on_the_real_hf_engine(tmp_path):
    from rft_core.rollout import build_engine

    engine = build_engine("hf", str(build_tiny_model(tmp_path / "m")), seed=0)
    # a short system prompt: the tiny model's character vocabulary allows 256 positions
    sampling = {"temperature": 1.0, "max_tokens": 6, "seed": 1}
    system = "Think in <think></think>, answer in <answer></answer>."
    tasks = [
        task(0, "1+2=?", "#### 3", rollout_args=sampling, system_prompt=system),
        task(1, "2*4=?", "#### 8", rollout_args=sampling, system_prompt=system),
    ]
    exps = workflows.get("math_workflow")({}).run_batch(tasks, engine, 2)
    assert [e.group_id for e in exps] == ["gsm:0", "gsm:0", "gsm:1", "gsm:1"]
    for exp, question in zip(exps, ["1+2=?", "1+2=?", "2*4=?", "2*4=?"], strict=True):
        prompt = engine.tokenizer.decode(exp.prompt_ids)
        assert question in prompt and "<think>" in prompt  # system prompt + question rendered
        assert 1 <= len(exp.response_ids) <= 6 and len(exp.logprobs) == len(exp.response_ids)
        assert exp.reward == pytest.approx(sum(exp.metrics.values()))
        assert exp.metrics["format_score"] in (0.1, -0.1)
