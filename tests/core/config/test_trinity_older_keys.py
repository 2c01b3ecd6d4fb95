"""Keys of older Trinity-RFT versions read as Trinity read them (``rft_core.config.trinity_older``):
``add_strategy``, ``data_processor_url``, ``explorer_input.reply_prefix`` (and the prompt it
makes); the did-you-mean hints never pointing to an unrelated key; the stall check for
step-wise runs; ``sync_method`` memory in mode both and nccl outside it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from run_configs import minimal_config
from tiny_lm import build_tiny_model

from rft_core import workflows
from rft_core.config import load_config_from_dict
from rft_core.data.task import Task
from rft_core.errors import ConfigError


def _cfg(**sections) -> dict:
    d = minimal_config()
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(d.get(key), dict):
            d[key].update(value)
        else:
            d[key] = value
    return d


# ---------------------------------------------------------------- add_strategy


def test_add_strategy_step_wise_grpo_is_read_as_multi_step_grpo(caplog):
    d = _cfg(algorithm={"algorithm_type": "grpo", "add_strategy": "step_wise_grpo"})
    with caplog.at_level(logging.WARNING):
        cfg = load_config_from_dict(d)
    assert cfg.algorithm.algorithm_type == "multi_step_grpo"
    assert cfg.algorithm.add_strategy is None
    assert cfg.algorithm.advantage_fn == "step_wise_grpo"
    assert "algorithm.add_strategy = step_wise_grpo is an older spelling: read as " in caplog.text


def test_add_strategy_grpo_is_read_as_its_advantage_fn_with_its_args(caplog):
    d = _cfg(
        algorithm={
            "algorithm_type": "grpo",
            "add_strategy": "grpo",
            "add_strategy_args": {"epsilon": 0.01},
        }
    )
    with caplog.at_level(logging.WARNING):
        cfg = load_config_from_dict(d)
    a = cfg.algorithm
    assert a.advantage_fn == "grpo" and a.advantage_fn_args["epsilon"] == 0.01
    assert a.add_strategy is None and a.add_strategy_args is None
    assert "read as algorithm.advantage_fn grpo" in caplog.text


@pytest.mark.parametrize(
    ("strategy", "text"),
    [
        ("reward_variance", "an older Trinity-RFT add strategy: drops groups"),
        ("bogus", "is not an add strategy Trinity-RFT had"),
    ],
)
def test_other_add_strategies_are_refused_by_name(strategy, text):
    with pytest.raises(ConfigError) as info:
        load_config_from_dict(_cfg(algorithm={"add_strategy": strategy}))
    assert info.value.path == "algorithm.add_strategy" and text in str(info.value)


def test_step_wise_grouping_contradicting_the_algorithm_is_refused():
    d = _cfg(algorithm={"algorithm_type": "ppo", "add_strategy": "step_wise_grpo"})
    with pytest.raises(ConfigError, match="contradicts algorithm_type ppo"):
        load_config_from_dict(d)


# ---------------------------------------------------------------- data_processor_url


def test_data_processor_url_is_refused_naming_the_outside_service():
    d = _cfg(data_processor={"data_processor_url": "http://127.0.0.1:5005/data_processor"})
    with pytest.raises(ConfigError) as info:
        load_config_from_dict(d)
    assert info.value.path == "data_processor.data_processor_url"
    assert "an outside data-processor service" in str(info.value)
    assert "did you mean" not in str(info.value) and "\n" not in str(info.value)


# ---------------------------------------------------------------- did you mean


@pytest.mark.parametrize(
    ("section", "key", "hint"),
    [
        ("algorithm", "pick_strategy", None),  # not sample_strategy: only '_strategy' shared
        ("algorithm", "sample_stratgy", "sample_strategy"),  # a typo still gets its hint
        ("synchronizer", "sync_intervall", "sync_interval"),
    ],
)
def test_unknown_key_hints_point_only_at_close_spellings(section, key, hint):
    d = _cfg(**{section: {key: 1}})
    with pytest.raises(ConfigError) as info:
        load_config_from_dict(d)
    message = str(info.value)
    if hint is None:
        assert "did you mean" not in message, message
    else:
        assert f"did you mean '{hint}'?" in message


# ------------------------------------------------- workflow class paths, token budget


def _with_workflow(name: str) -> dict:
    d = _cfg()
    d["buffer"]["explorer_input"]["default_workflow_type"] = name
    return d


def test_trinitys_learn2ask_class_path_is_read_as_the_registered_workflow(caplog):
    path = "examples.learn_to_ask.workflow.workflow_learn2ask.Learn2AskWorkflow"
    with caplog.at_level(logging.WARNING):
        cfg = load_config_from_dict(_with_workflow(path))
    assert cfg.buffer.explorer_input.taskset.default_workflow_type == "learn2ask_workflow"
    assert f"buffer.explorer_input.default_workflow_type = {path}: Trinity-RFT's example " in (
        caplog.text
    )


def test_another_class_path_is_refused_naming_the_plugin_directory():
    from rft_core.config import check_registered_names
    from rft_core.registries import registered_names_table

    path = "examples.bots.workflow.bots_math_boxed_workflow.BOTSMathBoxedWorkflow"
    cfg = load_config_from_dict(_with_workflow(path))
    with pytest.raises(ConfigError) as info:
        check_registered_names(cfg, registered_names_table())
    assert info.value.path == "buffer.explorer_input.taskset.default_workflow_type"
    assert f"{path!r} is a Python class path" in str(info.value)
    assert "--plugin-dir" in str(info.value) and "registered:" not in str(info.value)


def test_a_token_budget_below_max_model_len_is_a_warning_not_a_refusal(caplog):
    d = _cfg(trainer={"max_token_len_per_gpu": 200})  # max_model_len 256
    with caplog.at_level(logging.WARNING):
        cfg = load_config_from_dict(d)
    assert cfg.trainer.max_token_len_per_gpu == 200
    assert "trainer.max_token_len_per_gpu 200 is below model.max_model_len 256" in caplog.text
    with pytest.raises(ConfigError) as info:
        load_config_from_dict(_cfg(trainer={"max_token_len_per_gpu": 0}))
    assert info.value.path == "trainer.max_token_len_per_gpu"


def test_workflow_hints_do_not_point_at_unrelated_workflows():
    with pytest.raises(ConfigError) as info:
        workflows.get("webshop_workflow")
    assert "did you mean" not in str(info.value)  # shares only "_workflow" with any registered name
    with pytest.raises(ConfigError) as info:
        workflows.get("math_wrokflow")
    assert "did you mean 'math_workflow'?" in str(info.value)


# ---------------------------------------------------------------- reply_prefix


def test_explorer_input_reply_prefix_reaches_tasksets_without_one():
    d = _cfg()
    d["buffer"]["explorer_input"]["reply_prefix"] = "<think>"
    d["buffer"]["explorer_input"]["eval_tasksets"] = [
        {"name": "e", "path": "/d", "format": {"reply_prefix": "Answer:"}}
    ]
    cfg = load_config_from_dict(d)
    ei = cfg.buffer.explorer_input
    assert ei.taskset.format.reply_prefix == "<think>"
    assert ei.eval_tasksets[0].format.reply_prefix == "Answer:"


def test_reply_prefix_ends_the_prompt_and_the_model_continues(tmp_path: Path):
    from rft_core.rollout import build_engine

    engine = build_engine("hf", str(build_tiny_model(tmp_path / "m")), seed=0)
    sampling = {"temperature": 1.0, "max_tokens": 4, "seed": 1}
    plain = Task(0, "t", {}, "1+2=?", "3", rollout_args=sampling, reward_fn="accuracy_reward")
    prefixed = Task(
        0,
        "t",
        {},
        "1+2=?",
        "3",
        rollout_args=sampling,
        reward_fn="accuracy_reward",
        reply_prefix="<think>",
    )
    wf = workflows.get("simple_workflow")({})
    without = wf.run_batch([plain], engine, 1)[0]
    with_prefix = wf.run_batch([prefixed], engine, 1)[0]
    text = engine.tokenizer.decode(with_prefix.prompt_ids)
    # the chat template's prompt (generation prompt on), then the prefix: the reply goes on
    assert text == engine.tokenizer.decode(without.prompt_ids) + "<think>"
    assert 1 <= len(with_prefix.response_ids) <= 4


def test_a_multi_turn_workflow_refuses_a_reply_prefix():
    task = Task(0, "lake", {}, "4x4", None, workflow="frozen_lake_workflow", reply_prefix="<a>")
    with pytest.raises(ConfigError) as info:
        workflows.get("frozen_lake_workflow")({}).run_batch([task], engine=None, repeat_times=1)
    assert info.value.path == "buffer.explorer_input.taskset.format.reply_prefix"


# ---------------------------------------------------------------- the stall check


def _stall(algorithm: dict, workflow_args: dict | None = None, train_batch_size: int = 40):
    d = _cfg(algorithm=algorithm)
    d["buffer"]["train_batch_size"] = train_batch_size
    if workflow_args is not None:
        d["buffer"]["explorer_input"]["taskset"]["workflow_args"] = workflow_args
    return d


def test_more_experiences_than_runs_stalls_a_single_turn_run():
    # batch_size 4 x repeat_times 8 = 32 runs, one experience each; 40 never come
    with pytest.raises(ConfigError, match="use at most 32"):
        load_config_from_dict(_stall({"algorithm_type": "grpo", "repeat_times": 8}))


def test_a_step_wise_run_may_ask_for_several_experiences_per_run(monkeypatch, caplog):
    from rft_core.config import buffer_checks

    # the step-wise family (wt-algos' multi_step_grpo) is named in STEP_WISE_ALGORITHMS; the
    # check itself is tried here with grpo standing in for one, so it runs on this branch
    monkeypatch.setattr(buffer_checks, "STEP_WISE_ALGORITHMS", {"grpo"})
    algo = {"algorithm_type": "grpo", "repeat_times": 8}
    # Trinity's "16*8*5": 4 x 8 runs x 5 turns = 160 at most
    with caplog.at_level(logging.WARNING):
        cfg = load_config_from_dict(_stall(algo, {"max_env_steps": 5}, train_batch_size=160))
    assert cfg.buffer.train_batch_size == 160
    assert "accepted because algorithm_type grpo makes one experience per turn" in caplog.text
    assert "at most 160 (buffer.explorer_input.taskset.workflow_args.max_env_steps 5" in caplog.text
    with pytest.raises(ConfigError) as info:
        load_config_from_dict(_stall(algo, {"max_env_steps": 5}, train_batch_size=161))
    assert "x buffer.explorer_input.taskset.workflow_args.max_env_steps 5 = 160" in str(info.value)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        load_config_from_dict(_stall(algo, {}, train_batch_size=1000))  # no turn limit: warned
    assert "a number its workflow_args do not bound" in caplog.text


# ---------------------------------------------------------------- sync methods


def test_memory_sync_is_accepted_in_mode_both():
    cfg = load_config_from_dict(_cfg(mode="both", synchronizer={"sync_method": "memory"}))
    assert cfg.synchronizer.sync_method == "memory"


def test_nccl_outside_mode_both_is_read_as_the_modes_method(caplog):
    d = _cfg(mode="explore", synchronizer={"sync_method": "nccl"})
    d["buffer"]["trainer_input"] = {
        "experience_buffer": {"name": "e", "storage_type": "queue", "path": "sqlite:///e.db"}
    }
    with caplog.at_level(logging.WARNING):
        cfg = load_config_from_dict(d)
    assert cfg.synchronizer.sync_method == "checkpoint"
    assert "read as checkpoint in mode explore, as Trinity-RFT does" in caplog.text
    with pytest.raises(ConfigError, match="mode explore uses checkpoint"):
        load_config_from_dict(_cfg(mode="explore", synchronizer={"sync_method": "memory"}))


# ---------------------------------------------------------------- other older spellings


def test_actor_grad_clip_is_read_as_grad_clip(caplog):
    with caplog.at_level(logging.WARNING):
        cfg = load_config_from_dict(_cfg(trainer={"actor_grad_clip": 0.5}))
    assert cfg.trainer.grad_clip == 0.5 and cfg.trainer.actor_grad_clip is None
    assert "trainer.actor_grad_clip is an older Trinity-RFT spelling: read as" in caplog.text
    with pytest.raises(ConfigError, match="contradicts trainer.grad_clip 1.0"):
        load_config_from_dict(_cfg(trainer={"actor_grad_clip": 0.5, "grad_clip": 1.0}))


def test_a_loss_agg_mode_among_policy_loss_args_gives_way_to_the_algorithms(caplog):
    # Trinity's frozen-lake example writes it there; Trinity 0.6 overwrites it with
    # algorithm.loss_agg_mode (here the grpo preset's token-mean), and so does this
    d = _cfg(algorithm={"policy_loss_fn_args": {"loss_agg_mode": "seq-mean-token-sum"}})
    with caplog.at_level(logging.WARNING):
        cfg = load_config_from_dict(d)
    assert "loss_agg_mode" not in cfg.algorithm.policy_loss_fn_args
    assert cfg.algorithm.loss_agg_mode == "token-mean"
    assert "replaced by algorithm.loss_agg_mode" in caplog.text
