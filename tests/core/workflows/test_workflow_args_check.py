"""Nothing in workflow_args / reward_fn_args is dropped silently (issue 22, item 5): a key the
workflow or reward function does not take is a warning naming its full YAML path, an error
where ignoring it would change results (refused keys, misspellings of taken ones, reward
function arguments), and an outside judge named in workflow_args.reward_fn_type is refused by
name. The check runs on the live registries and on the committed table alike (the web's)."""

from __future__ import annotations

import pytest
from run_configs import check_names, workflow_config

from rft_core import workflows
from rft_core.config.committed_names import committed_registered_names
from rft_core.config.registered import check_registered_names
from rft_core.errors import ConfigError
from rft_core.registries import registered_names_table

WA = "buffer.explorer_input.taskset.workflow_args"


def test_every_built_in_workflow_declares_its_args():
    table = workflows.workflow_args_table()
    built_in = committed_registered_names()["workflows"]  # test modules may register more
    assert set(built_in) <= set(table)
    assert [name for name in built_in if table[name] is None] == []
    assert committed_registered_names()["workflow_args"] == {n: table[n] for n in built_in}


def test_a_subclass_that_declares_nothing_is_not_checked(caplog):
    from rft_core.workflows.simple import SimpleWorkflow

    class Mine(SimpleWorkflow):  # a user's workflow reading an argument of its own
        pass

    workflows.register("mine_for_args_test")(Mine)
    try:
        assert workflows.workflow_args_table()["mine_for_args_test"] is None
        with caplog.at_level("WARNING"):
            check_registered_names(
                workflow_config("mine_for_args_test", workflow_args={"depth": 3}),
                registered_names_table(),
            )
        assert "workflow_args.depth" not in caplog.text
    finally:
        workflows.WORKFLOWS._entries.pop("mine_for_args_test")


def test_an_unknown_key_is_a_warning_with_its_full_path(caplog):
    with caplog.at_level("WARNING"):
        check_names(
            workflow_config(
                "math_ruler_workflow", workflow_args={"judge_model": 0, "temperature": 1}
            )
        )
    assert f"{WA}.temperature: not taken by math_ruler_workflow, ignored" in caplog.text
    assert f"{WA}.judge_model" not in caplog.text


def test_a_misspelt_key_is_an_error():
    with pytest.raises(ConfigError) as info:
        check_names(workflow_config("math_rm_workflow", workflow_args={"judge_modle": 0}))
    assert info.value.path == f"{WA}.judge_modle"
    assert "did you mean 'judge_model'?" in str(info.value)


def test_frozen_lake_takes_trinitys_step_bounds():
    cfg = workflow_config(
        "frozen_lake_workflow", workflow_args={"env_max_steps": 8, "agent_max_steps": 10}
    )
    check_names(cfg)  # no error, no warning
    wf = workflows.get("frozen_lake_workflow")({"env_max_steps": 8, "agent_max_steps": 10})
    assert (wf.env_max_steps, wf.max_steps) == (8, 10)
    # the older single bound sets both; Trinity's current defaults with the new spelling
    assert (lambda w: (w.env_max_steps, w.max_steps))(
        workflows.get("frozen_lake_workflow")({"max_steps": 5})
    ) == (5, 5)
    assert (lambda w: (w.env_max_steps, w.max_steps))(
        workflows.get("frozen_lake_workflow")({"agent_max_steps": 6})
    ) == (8, 6)
    assert (lambda w: (w.env_max_steps, w.max_steps))(
        workflows.get("frozen_lake_workflow")({})
    ) == (10, 10)


def test_frozen_lake_env_max_steps_bounds_the_map():
    from rft_core.data.task import Task
    from rft_core.workflows.frozen_lake import shortest_path

    wf = workflows.get("frozen_lake_workflow")({"env_max_steps": 2, "agent_max_steps": 10})
    for seed in range(5):
        board = wf.board(Task(0, "t", {"size": 6, "p": 0.8, "seed": seed}, "p"))
        assert len(shortest_path(board)) <= 2  # the goal is at most 2 moves from the start


@pytest.mark.parametrize(
    ("args", "key", "text"),
    [
        ({"use_multistep_prompt": True}, "use_multistep_prompt", "few-shot"),
        ({"reward_fn_type": "math_reward"}, "reward_fn_type", "not applied here"),
        ({"reward_fn_args": {"k": 1}}, "reward_fn_args", "not applied here"),
    ],
)
def test_frozen_lake_refuses_what_it_would_ignore(args, key, text):
    with pytest.raises(ConfigError) as info:
        check_names(workflow_config("frozen_lake_workflow", workflow_args=args))
    assert info.value.path == f"{WA}.{key}"
    assert text in str(info.value)
    # the workflow refuses it too when built without the config check
    with pytest.raises(ConfigError, match=text):
        workflows.get("frozen_lake_workflow")(args)


def test_frozen_lake_accepts_a_refused_key_set_false():
    check_names(
        workflow_config("frozen_lake_workflow", workflow_args={"use_multistep_prompt": False})
    )


def test_an_outside_judge_in_workflow_args_is_refused_by_name():
    # Trinity's grpo_frozenlake_openjudge: the grader calls an outside judge API
    cfg = workflow_config(
        "frozen_lake_workflow",
        workflow_args={"env_max_steps": 8, "reward_fn_type": "trajectory_accuracy_grader_reward"},
    )
    with pytest.raises(ConfigError) as info:
        check_names(cfg)
    assert info.value.path == f"{WA}.reward_fn_type"
    assert (
        "'trajectory_accuracy_grader_reward' needs an outside OpenAI-compatible judge API"
        in str(info.value)
    )


def test_reward_fn_args_the_function_does_not_take_are_an_error():
    with pytest.raises(ConfigError) as info:
        check_names(workflow_config("math_workflow", reward_fn_args={"weights": {}}))
    assert info.value.path == "buffer.explorer_input.taskset.reward_fn_args.weights"
    assert "'math_reward' takes no argument 'weights'" in str(info.value)
    check_names(
        workflow_config(
            "math_workflow",
            default_reward_fn_type="rlcr_reward",
            reward_fn_args={"weights": None},
        )
    )


def test_reward_settings_a_workflow_does_not_use_are_warned(caplog):
    # Trinity's learn2ask example sets math_reward, which the workflow never calls
    with caplog.at_level("WARNING"):
        check_names(
            workflow_config(
                "learn2ask_workflow",
                default_reward_fn_type="math_reward",
                workflow_args={"train_mode": "Ra+Rs", "fusion_mode": "default"},
            )
        )
    assert (
        "buffer.explorer_input.taskset.default_reward_fn_type: not used by learn2ask_workflow"
        in caplog.text
    )


def test_the_judge_demo_config_passes_the_check_without_a_warning(caplog, monkeypatch):
    from pathlib import Path

    from rft_core.config import load_config
    from rft_core.demo_judge import GROUP_SIZE, JUDGE_PROMPT

    monkeypatch.delenv("TRINITY_CHECKPOINT_ROOT_DIR", raising=False)
    demo = (
        Path(__file__).resolve().parents[3] / "examples" / "demo" / "judge_ruler_trained_judge.yaml"
    )
    with caplog.at_level("WARNING"):
        cfg = load_config(demo)
        check_names(cfg)
    assert "workflow_args" not in caplog.text and "reward_fn" not in caplog.text
    ts = cfg.buffer.explorer_input.taskset
    assert ts.default_workflow_type == "math_ruler_workflow"
    # the trained demo judge (trinity init-demo --judge), beside the demo policy
    judge = cfg.explorer.auxiliary_models[0].model_path
    assert (
        judge.endswith("/judge")
        and judge.rsplit("/", 1)[0] == cfg.model.model_path.rsplit("/", 1)[0]
    )
    assert (
        ts.workflow_args["judge_prompt"] == JUDGE_PROMPT
        and cfg.algorithm.repeat_times == GROUP_SIZE
    )
