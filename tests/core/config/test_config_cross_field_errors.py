"""Every cross-field problem of a config at once: rules over several fields (lengths, group
size, duplicate names, the stall check, sync method, ...) report and go on, each with the line
the CLI prints when it is the only problem, and the CLI prints them all and exits 2."""

from __future__ import annotations

import copy

import pytest
import yaml
from run_configs import dry_run

from rft_core.config import load_config_from_dict
from rft_core.errors import ConfigError, ConfigErrors

BASE = {
    "mode": "both",
    "model": {"model_path": "m", "max_prompt_tokens": 64, "max_response_tokens": 64,
              "max_model_len": 128},
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 4},
    "buffer": {
        "batch_size": 2,
        "explorer_input": {
            "taskset": {"path": "d"},
            "eval_tasksets": [{"name": "a", "path": "d"}, {"name": "b", "path": "d"}],
        },
    },
}  # fmt: skip

# four problems that do not depend on one another, each as its own change of BASE
PROBLEMS = {
    "lengths": lambda c: c["model"].update(max_prompt_tokens=100),
    "group": lambda c: c["algorithm"].update(repeat_times=1),
    "duplicate eval name": lambda c: c["buffer"]["explorer_input"]["eval_tasksets"][1].update(
        name="a"
    ),
    "sync method": lambda c: c.update(mode="explore", synchronizer={"sync_method": "memory"}),
}
LINES = {
    "lengths": "model.max_model_len: max_prompt_tokens 100 + max_response_tokens 64 = 164 "
    "exceeds max_model_len 128; raise max_model_len or lower one of the two",
    "group": "algorithm.repeat_times: grpo compares the rollouts of one task, so it needs a "
    "group of at least 2 (got 1); set repeat_times to e.g. 8",
    "duplicate eval name": "buffer.explorer_input.eval_tasksets[1].name: duplicate eval taskset "
    "name 'a' (also eval_tasksets[0]); metric names eval/<name>/... would collide",
    "sync method": "synchronizer.sync_method: memory sync hands the trainer's weights to a "
    "running explorer (through the Ray object store, or in one process) (mode both or "
    "colocate); mode explore uses checkpoint",
}


def _with(*names: str) -> dict:
    config = copy.deepcopy(BASE)
    for name in names:
        PROBLEMS[name](config)
    return config


def test_the_base_config_loads():
    assert load_config_from_dict(_with()).buffer.train_batch_size == 8  # 2 tasks x 4 rollouts


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_each_problem_alone_is_one_error_with_its_line(name):
    with pytest.raises(ConfigError) as info:
        load_config_from_dict(_with(name))
    assert type(info.value) is ConfigError
    assert str(info.value) == LINES[name]


def test_four_cross_field_problems_are_four_errors_with_the_lines_of_each_alone():
    with pytest.raises(ConfigErrors) as info:
        load_config_from_dict(_with(*PROBLEMS))
    # in the validator's order: lengths, algorithm, buffer, synchronizer
    assert [str(e) for e in info.value.errors] == [
        LINES["lengths"],
        LINES["group"],
        LINES["duplicate eval name"],
        LINES["sync method"],
    ]


def test_a_rule_that_needs_a_missing_buffer_stops_and_the_others_still_report():
    data = _with("lengths", "group")
    data["mode"] = "train"  # trains from an experience buffer the config does not give
    data["buffer"]["train_batch_size"] = 8
    with pytest.raises(ConfigErrors) as info:
        load_config_from_dict(data)
    paths = [e.path for e in info.value.errors]
    assert paths == [
        "model.max_model_len",
        "algorithm.repeat_times",
        "buffer.trainer_input.experience_buffer",
    ]  # no ".path" or ".storage_type" error about the buffer that is not there


def test_cross_field_problems_of_two_stages_are_each_reported_under_their_stage():
    data = _with()
    data["stages"] = [
        {"stage_name": "warm", "algorithm": {"algorithm_type": "grpo", "repeat_times": 1},
         "buffer": _with("duplicate eval name")["buffer"]},
        {"stage_name": "warm"},
        {"stage_name": "rft", "mode": "explore", "synchronizer": {"sync_method": "memory"}},
    ]  # fmt: skip
    with pytest.raises(ConfigErrors) as info:
        load_config_from_dict(data)
    assert [str(e) for e in info.value.errors] == [
        "stages[1].stage_name: duplicate stage_name 'warm' (also stages[0]); stage names must "
        "be unique",
        "stages[0]." + LINES["group"],
        "stages[0]." + LINES["duplicate eval name"],
        "stages[2]." + LINES["sync method"],
    ]


def test_cross_field_rules_are_left_out_when_a_value_could_not_be_read():
    # a bad value's default stands in for it; rules over it could report what the user never wrote
    data = _with("group", "lengths")
    data["buffer"]["batch_size"] = "two"
    with pytest.raises(ConfigError) as info:
        load_config_from_dict(data)
    assert [e.path for e in info.value.errors] == ["buffer.batch_size"]


def test_trinity_run_dry_run_prints_every_cross_field_error_and_exits_2(tmp_path):
    path = tmp_path / "four_rules.yaml"
    path.write_text(yaml.safe_dump(_with(*PROBLEMS)))
    proc = dry_run(path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"trinity run: error: {LINES[name]}"
        for name in ("lengths", "group", "duplicate eval name", "sync method")
    ]
    assert proc.stdout == ""


def test_a_length_that_could_not_be_derived_is_not_compared_with():
    # max_response_tokens has no room; a stand-in takes its place, and the taskset's max_tokens
    # is not compared with it (the message would name a value nobody wrote)
    data = _with("group")
    data["model"] = {"model_path": "m", "max_model_len": 10, "max_prompt_tokens": 20}
    data["buffer"]["explorer_input"]["taskset"]["rollout_args"] = {"max_tokens": 99}
    with pytest.raises(ConfigErrors) as info:
        load_config_from_dict(data)
    assert [str(e) for e in info.value.errors] == [
        "model.max_prompt_tokens: 20 leaves no room for a response in max_model_len 10; lower "
        "it below 10",
        LINES["group"],
    ]


def test_a_bad_expert_data_ratio_ends_the_mix_checks_and_the_rest_still_report():
    data = _with("lengths", "duplicate eval name")
    data["algorithm"] = {"algorithm_type": "mix", "sample_strategy_args": {"expert_data_ratio": 2}}
    with pytest.raises(ConfigErrors) as info:
        load_config_from_dict(data)
    assert [e.path for e in info.value.errors] == [
        "model.max_model_len",
        "algorithm.sample_strategy_args.expert_data_ratio",  # no "expert dataset required" after it
        "buffer.explorer_input.eval_tasksets[1].name",
    ]
