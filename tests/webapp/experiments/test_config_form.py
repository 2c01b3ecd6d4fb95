"""The schema-driven experiment form (webapp/experiments/form_build.py, form_merge.py): YAML -> form -> YAML
keeps the meaning of every example and Trinity-RFT config; a posted form merges onto the
original mapping (unchanged fields keep their text, defaults are not added); lists and stages
are edited by position; errors land beside their field.

The path policy is not applied here: the corpus' model and data paths are not on this machine."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from rft_core.config import config_to_dict, load_config_from_dict
from rft_core.errors import ConfigError
from webapp.errors import ActionError
from webapp.experiments.config_policy import canonical_yaml, parse_yaml
from webapp.experiments.form_build import attach_errors, build_form
from webapp.experiments.form_merge import initial_post, merge_form
from webapp.experiments.form_values import field_for_path

ROOT = Path(__file__).resolve().parents[3]
CORPUS = sorted((ROOT / "examples").rglob("*.yaml")) + sorted(
    (ROOT / "tests/core/trinity_configs").glob("*.yaml")
)
DEMO = ROOT / "examples/demo/grpo_demo.yaml"


def loaded(data: dict) -> tuple[str, object]:
    """('ok', the resolved config as dicts) or ('refused', the CLI's message)."""
    try:
        return "ok", config_to_dict(load_config_from_dict(data))
    except ConfigError as err:
        return "refused", str(err)


def round_trip(data: dict, post: dict, *, trust_unchanged: bool = True) -> dict:
    return parse_yaml(canonical_yaml(merge_form(data, post, trust_unchanged=trust_unchanged)))


def test_the_corpus_holds_the_seed_config_and_the_trinity_configs():
    names = {p.name for p in CORPUS}
    assert "gsm8k.yaml" in names and "grpo_demo.yaml" in names
    assert len(CORPUS) >= 20


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.parametrize("trust_unchanged", [True, False], ids=["as-posted", "every-field-parsed"])
def test_yaml_to_form_to_yaml_keeps_the_loaded_config(path, trust_unchanged, caplog):
    """``every-field-parsed`` re-reads every field's rendered text, as if the user had typed it
    all: it proves the text encoding of each field, not just that untouched values survive."""
    caplog.set_level(logging.ERROR)
    data = parse_yaml(path.read_text())
    back = round_trip(data, initial_post(build_form(data)), trust_unchanged=trust_unchanged)
    before, after = loaded(data), loaded(back)
    assert before == after
    if before[0] == "refused":
        assert back == data  # mapping equality (order aside)


def test_the_seed_config_loads_and_round_trips_to_the_same_yaml():
    data = parse_yaml((ROOT / "examples/grpo_gsm8k/gsm8k.yaml").read_text())
    assert loaded(data)[0] == "ok"
    out = merge_form(data, initial_post(build_form(data)))
    assert out == data
    assert canonical_yaml(out) == canonical_yaml(data)


def demo_data() -> dict:
    return parse_yaml(DEMO.read_text())


def test_an_unchanged_field_keeps_its_interpolation_and_a_changed_one_is_set():
    data = demo_data()
    post = initial_post(build_form(data))
    post["buffer.batch_size"] = "4"
    out = merge_form(data, post)
    assert out["model"]["model_path"] == "${oc.env:RFT_DEMO_DIR,./var/demo}/model"
    assert out["buffer"]["batch_size"] == 4
    assert out["algorithm"]["optimizer"]["lr"] == pytest.approx(3e-5)


def test_a_field_left_at_its_default_is_not_added():
    data = demo_data()
    post = initial_post(build_form(data))
    post["trainer.trainer_strategy"] = "fsdp2"  # the default, not in the demo YAML
    post["model.top_k"] = "-1"
    out = merge_form(data, post)
    assert "trainer_strategy" not in out["trainer"] and "top_k" not in out["model"]
    assert out == data


def test_a_number_field_takes_an_interpolation():
    data = demo_data()
    post = initial_post(build_form(data))
    post["buffer.total_steps"] = "${oc.env:TRINITY_TOTAL_STEPS,5}"
    out = merge_form(data, post)
    assert out["buffer"]["total_steps"] == "${oc.env:TRINITY_TOTAL_STEPS,5}"
    assert load_config_from_dict(out).buffer.total_steps == 5


def test_emptying_a_field_removes_the_key():
    data = demo_data()
    post = initial_post(build_form(data))
    post["explorer.eval_interval"] = ""
    assert "eval_interval" not in merge_form(data, post)["explorer"]


def test_an_eval_taskset_is_added_removed_and_reordered():
    data = demo_data()
    data["buffer"]["explorer_input"]["eval_tasksets"].append(
        {**data["buffer"]["explorer_input"]["eval_tasksets"][0], "name": "second"}
    )
    post = initial_post(build_form(data))
    prefix = "buffer.explorer_input.eval_tasksets"
    # swap the two items (as the JS renumbers them after a move) and add a third, new one
    swapped = {}
    for key, value in post.items():
        if key.startswith(f"{prefix}[0]"):
            swapped[key.replace(f"{prefix}[0]", f"{prefix}[1]")] = value
        elif key.startswith(f"{prefix}[1]"):
            swapped[key.replace(f"{prefix}[1]", f"{prefix}[0]")] = value
        else:
            swapped[key] = value
    swapped[f"{prefix}[2].__origin__"] = "new"
    swapped[f"{prefix}[2].name"] = "third"
    swapped[f"{prefix}[2].path"] = "/data/third"
    out = merge_form(data, swapped)
    names = [ts["name"] for ts in out["buffer"]["explorer_input"]["eval_tasksets"]]
    assert names == ["second", "arithmetic-eval", "third"]
    assert out["buffer"]["explorer_input"]["eval_tasksets"][2] == {
        "name": "third",
        "path": "/data/third",
    }
    # remove every item: the key goes
    removed = {k: v for k, v in post.items() if not k.startswith(f"{prefix}[")}
    assert "eval_tasksets" not in merge_form(data, removed)["buffer"]["explorer_input"]


def test_the_stages_editor_reorders_removes_and_edits_an_override():
    data = demo_data()
    post = initial_post(build_form(data))
    assert post["stages[0].algorithm.algorithm_type"] == "sft"
    assert post["stages[0].algorithm"] == ""  # every key of it has a field
    post["stages[0].buffer.total_steps"] = "5"
    out = merge_form(data, post)
    assert out["stages"][0]["buffer"]["total_steps"] == 5
    assert out["stages"][1] == {"stage_name": "rft"}
    # drop the warmup stage
    only_rft = {
        k.replace("stages[1]", "stages[0]"): v
        for k, v in post.items()
        if not k.startswith("stages[0]")
    }
    assert merge_form(data, only_rft)["stages"] == [{"stage_name": "rft"}]
    # a new stage with its own mode
    post["stages[2].__origin__"] = "new"
    post["stages[2].stage_name"] = "extra"
    post["stages[2].mode"] = "bench"
    assert merge_form(data, post)["stages"][2] == {"stage_name": "extra", "mode": "bench"}


def test_the_chosen_advantage_fns_arguments_are_real_fields():
    data = demo_data()
    form = build_form(data)
    fields = {f.name: f for f in form.fields()}
    eps = fields["algorithm.advantage_fn_args.epsilon"]
    # the argument of grpo, rec and the group fns built on grpo's scores (each default 1e-6)
    takers = ["clipb", "gigpo", "grpo", "rec", "step_wise_grpo"]
    assert eps.show_when == {"@advantage_fn": takers} and eps.default_text == "1.0e-06"
    assert fields["algorithm.advantage_fn_args.lam"].show_when == {"@advantage_fn": ["gae", "ppo"]}
    assert fields["algorithm.policy_loss_fn_args.clip_range"].default_text == "0.2"
    post = initial_post(form)
    post["algorithm.advantage_fn_args.epsilon"] = "0.01"
    assert merge_form(data, post)["algorithm"]["advantage_fn_args"] == {"epsilon": 0.01}


def test_vllm_and_critic_fields_are_conditional_and_unimplemented_ones_left_out():
    data = demo_data()
    data["model"]["lora_configs"] = [{"name": "a"}]  # unimplemented: preserved, not shown
    form = build_form(data)
    fields = {f.name: f for f in form.fields()}
    assert fields["explorer.rollout_model.gpu_memory_utilization"].show_when == {
        "explorer.rollout_model.engine_type": ["vllm"]
    }
    assert fields["model.critic_model_path"].show_when == {"algorithm.algorithm_type": ["ppo"]}
    assert "model.lora_configs" not in fields and "trainer.megatron.sequence_parallel" not in fields
    assert fields["model.model_path"].level == "beginner"
    assert fields["trainer.trainer_strategy"].level == "expert"
    assert fields["algorithm.algorithm_type"].choices[:2] == ["grpo", "rloo"]
    assert merge_form(data, initial_post(form))["model"]["lora_configs"] == [{"name": "a"}]


def test_an_error_path_maps_to_its_field_or_closest_ancestor():
    names = {"buffer.batch_size", "stages[0].buffer", "buffer.explorer_input.eval_tasksets[0].name"}
    assert field_for_path("buffer.batch_size", names) == "buffer.batch_size"
    assert field_for_path("stages[0].buffer.total_steps", names) == "stages[0].buffer"
    assert field_for_path("buffer.explorer_input.taskset", names) is None
    form = build_form(demo_data())
    attach_errors(form, {"buffer.batch_sise": "unknown key", "buffer.batch_size": "must be >= 1"})
    assert form.errors == {"buffer.batch_size": "must be >= 1"}
    assert form.top_errors == ["buffer.batch_sise: unknown key"]


def test_bad_yaml_in_a_yaml_field_is_an_error_beside_it():
    data = demo_data()
    post = initial_post(build_form(data))
    post["algorithm.advantage_fn_args"] = "{unclosed: ["
    with pytest.raises(ActionError) as err:
        merge_form(data, post)
    assert list(err.value.errors) == ["algorithm.advantage_fn_args"]
    assert "is not valid YAML" in err.value.errors["algorithm.advantage_fn_args"]


def test_stage_overrides_are_fields_and_round_trip_through_yaml():
    data = demo_data()
    post = initial_post(build_form(data))
    # the warmup stage's buffer, field by field
    assert post["stages[0].buffer.train_batch_size"] == "8"
    assert (
        post["stages[0].buffer.trainer_input.experience_buffer.format.messages_key"] == "messages"
    )
    post["stages[0].buffer.total_steps"] = "7"
    post["stages[0].buffer.trainer_input.experience_buffer.path"] = "/data/sft.jsonl"
    # the rft stage overrides its algorithm and synchronizer; its buffer gets a taskset (typed in
    # the raw YAML box, which merges key by key) and a batch size (a field)
    post["stages[1].algorithm.algorithm_type"] = "rloo"
    post["stages[1].algorithm.optimizer.lr"] = "2e-5"
    post["stages[1].synchronizer.sync_interval"] = "2"
    post["stages[1].buffer"] = (
        "explorer_input:\n  tasksets:\n  - name: more\n    path: /data/more\n"
    )
    post["stages[1].buffer.batch_size"] = "4"
    out = merge_form(data, post)
    assert out["stages"][0]["buffer"]["total_steps"] == 7
    assert out["stages"][0]["buffer"]["train_batch_size"] == 8  # untouched, as written
    assert out["stages"][0]["buffer"]["trainer_input"]["experience_buffer"] == {
        "name": "sft_warmup_dataset",
        "storage_type": "file",
        "path": "/data/sft.jsonl",
        "format": {"messages_key": "messages"},
    }
    assert out["stages"][1] == {
        "stage_name": "rft",
        "algorithm": {"algorithm_type": "rloo", "optimizer": {"lr": 2e-5}},
        "buffer": {
            "batch_size": 4,
            "explorer_input": {"tasksets": [{"name": "more", "path": "/data/more"}]},
        },
        "synchronizer": {"sync_interval": 2},
    }
    # form -> YAML -> form: every value back in its field, the stage's taskset list too
    again = yaml.safe_load(yaml.safe_dump(out))
    post2 = initial_post(build_form(again))
    assert post2["stages[0].buffer.total_steps"] == "7"
    assert post2["stages[1].algorithm.optimizer.lr"] == "2.0e-05"
    assert post2["stages[1].buffer.batch_size"] == "4"
    assert post2["stages[1].buffer.explorer_input.tasksets[0].path"] == "/data/more"
    assert post2["stages[1].buffer"] == ""
    assert merge_form(again, post2) == again
    # emptying the box takes out the keys it held, and only those
    again["stages"][1]["buffer"]["replay_note"] = "kept until the box is emptied"
    post2 = initial_post(build_form(again))
    assert yaml.safe_load(post2["stages[1].buffer"]) == {
        "replay_note": again["stages"][1]["buffer"]["replay_note"]
    }
    post2["stages[1].buffer"] = ""
    assert merge_form(again, post2)["stages"][1]["buffer"] == {
        "batch_size": 4,
        "explorer_input": {"tasksets": [{"name": "more", "path": "/data/more"}]},
    }


def test_a_stage_box_that_is_not_a_mapping_is_refused_naming_it():
    data = demo_data()
    post = initial_post(build_form(data))
    post["stages[0].buffer"] = "- a list"
    with pytest.raises(ActionError) as info:
        merge_form(data, post)
    assert info.value.errors == {"stages[0].buffer": "must be a mapping of buffer keys, got list"}
