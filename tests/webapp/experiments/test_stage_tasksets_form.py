"""A stage's tasksets in the experiment form (webapp/experiments/form_build.py, form_merge.py):
``stages[i].buffer.explorer_input.tasksets`` / ``eval_tasksets`` are lists of the main form's
taskset fields and ``trainer_input.experience_buffer`` a group of fields; every example with
``stages`` goes form -> YAML -> form unchanged, keys without a field included."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from webapp.experiments.config_policy import canonical_yaml
from webapp.experiments.form_build import build_form
from webapp.experiments.form_merge import initial_post, merge_form
from webapp.experiments.form_model import template_fields

ROOT = Path(__file__).resolve().parents[3]
STAGED = [
    p
    for p in sorted((ROOT / "examples").rglob("*.yaml"))
    if yaml.safe_load(p.read_text()).get("stages")
]
EVAL = "stages[1].buffer.explorer_input.eval_tasksets"


def _round_trip(data: dict) -> tuple[dict, dict[str, str], dict[str, str]]:
    """(the config after form -> YAML, the form's post before, the post of the form rebuilt from that YAML)."""
    post = initial_post(build_form(data))
    again = yaml.safe_load(canonical_yaml(merge_form(data, post)))
    return again, post, initial_post(build_form(again))


def _with_stage_eval_tasksets(data: dict) -> dict:
    """``data`` whose second stage has a buffer of its own with two eval tasksets, one holding a
    key the form has no field for."""
    data = copy.deepcopy(data)
    data["stages"][1]["buffer"] = {
        "total_steps": 3,
        "explorer_input": {
            "taskset": {"name": "train", "path": "/data/train"},
            "eval_tasksets": [
                {"name": "easy", "path": "/data/easy", "repeat_times": 2},
                {"name": "hard", "path": "/data/hard", "not_a_field": {"kept": [1, 2]}},
            ],
        },
    }
    return data


def _stages_swapped(post: dict[str, str]) -> dict[str, str]:
    """``post`` as the browser posts it after moving the second stage up (page order renumbered)."""
    swapped = {}
    for key, value in post.items():
        for a, b in (("stages[0]", "stages[1]"), ("stages[1]", "stages[0]")):
            if key.startswith(a):
                key = b + key[len(a) :]
                break
        swapped[key] = value
    return swapped


def test_there_are_examples_with_stages_holding_an_sft_experience_buffer():
    names = {p.name for p in STAGED}
    assert {"grpo_demo.yaml", "judge_ruler_trained_judge.yaml", "gsm8k_sft_warmup.yaml"} <= names


@pytest.mark.parametrize("path", STAGED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_with_stages_goes_form_yaml_form_unchanged(path):
    data = yaml.safe_load(path.read_text())
    again, post, post_again = _round_trip(data)
    assert again == data
    assert post_again == post
    # the SFT stage's experience buffer is in fields, not in the stage's YAML box
    for i, stage in enumerate(data["stages"]):
        eb = (stage.get("buffer") or {}).get("trainer_input", {}).get("experience_buffer")
        if eb:
            prefix = f"stages[{i}].buffer.trainer_input.experience_buffer"
            assert post[f"{prefix}.path"] == eb["path"]
            assert post[f"{prefix}.name"] == eb["name"]
            assert "experience_buffer" not in post[f"stages[{i}].buffer"]


@pytest.mark.parametrize("path", STAGED, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_stage_with_its_own_eval_tasksets_round_trips_with_every_key(path):
    data = _with_stage_eval_tasksets(yaml.safe_load(path.read_text()))
    post = initial_post(build_form(data))
    assert post[f"{EVAL}[0].path"] == "/data/easy"
    assert post[f"{EVAL}[0].repeat_times"] == "2"
    assert post[f"{EVAL}[1].name"] == "hard"
    assert post["stages[1].buffer.explorer_input.taskset.path"] == "/data/train"
    assert post["stages[1].buffer"] == ""  # every key of it has a field or a list
    again, _, post_again = _round_trip(data)
    assert again == data  # not_a_field, which no field shows, kept
    assert post_again == post


def test_editing_adding_and_reordering_a_stages_eval_tasksets_lands_in_the_yaml():
    data = _with_stage_eval_tasksets(
        yaml.safe_load((ROOT / "examples/demo/grpo_demo.yaml").read_text())
    )
    post = initial_post(build_form(data))
    # the browser posts the items in page order: "hard" moved first, a new one at the end
    for key in [k for k in post if k.startswith(f"{EVAL}[")]:
        index, rest = int(key[len(EVAL) + 1]), key[len(EVAL) + 3 :]
        post[f"{EVAL}[{5 + (1 - index)}]{rest}"] = post.pop(key)
    post[f"{EVAL}[5].path"] = "/data/harder"
    post[f"{EVAL}[7].__origin__"] = "new"
    post[f"{EVAL}[7].name"] = "new-one"
    post[f"{EVAL}[7].path"] = "/data/new"
    out = merge_form(data, post)
    assert out["stages"][1]["buffer"]["explorer_input"]["eval_tasksets"] == [
        {"name": "hard", "path": "/data/harder", "not_a_field": {"kept": [1, 2]}},
        {"name": "easy", "path": "/data/easy", "repeat_times": 2},
        {"name": "new-one", "path": "/data/new"},
    ]
    assert out["stages"][0] == data["stages"][0]
    assert {k: v for k, v in out.items() if k != "stages"} == {
        k: v for k, v in data.items() if k != "stages"
    }


def test_stages_reordered_take_their_own_tasksets_along():
    data = _with_stage_eval_tasksets(
        yaml.safe_load((ROOT / "examples/demo/grpo_demo.yaml").read_text())
    )
    post = initial_post(build_form(data))
    swapped = _stages_swapped(post)
    swapped["stages[0].buffer.explorer_input.eval_tasksets[0].path"] = "/data/easier"
    out = merge_form(data, swapped)
    expected = copy.deepcopy(data["stages"][::-1])
    expected[0]["buffer"]["explorer_input"]["eval_tasksets"][0]["path"] = "/data/easier"
    assert out["stages"] == expected


def test_a_new_stage_gets_eval_tasksets_from_its_own_empty_item():
    data = yaml.safe_load((ROOT / "examples/demo/grpo_demo.yaml").read_text())
    form = build_form(data)
    names = {f.name for f in template_fields(form)}
    assert "stages[__i__].buffer.explorer_input.eval_tasksets[__j__].path" in names
    post = initial_post(form)
    # the JS cloned a stage (index 2) and, inside it, an eval taskset (index 0)
    post["stages[2].__origin__"] = "new"
    post["stages[2].stage_name"] = "extra"
    post["stages[2].buffer.explorer_input.eval_tasksets.__rendered__"] = "1"
    post["stages[2].buffer.explorer_input.eval_tasksets[0].__origin__"] = "new"
    post["stages[2].buffer.explorer_input.eval_tasksets[0].path"] = "/data/e"
    out = merge_form(data, post)
    assert out["stages"][2] == {
        "stage_name": "extra",
        "buffer": {"explorer_input": {"eval_tasksets": [{"path": "/data/e"}]}},
    }


def test_a_post_whose_list_markers_do_not_fit_the_config_changes_nothing_it_cannot_place():
    data = _with_stage_eval_tasksets(
        yaml.safe_load((ROOT / "examples/demo/grpo_demo.yaml").read_text())
    )
    post = initial_post(build_form(data))
    # no marker for the stages list, an eval taskset list marked in a stage past the end
    odd = {k: v for k, v in post.items() if not k.startswith("stages.")}
    odd["stages[7].buffer.explorer_input.eval_tasksets.__rendered__"] = "1"
    odd["stages[7].buffer.explorer_input.eval_tasksets[0].__origin__"] = "new"
    odd["stages[7].buffer.explorer_input.eval_tasksets[0].path"] = "/data/x"
    assert merge_form(data, odd) == data
    # the stages swapped but the moved stage's eval taskset list unmarked: its fields cannot be
    # placed (the index names no item of a known list), so they change nothing
    swapped = _stages_swapped(post)
    inner = "stages[0].buffer.explorer_input.eval_tasksets"
    for key in [
        k for k in swapped if k.startswith(inner) and k.endswith(("__rendered__", "__origin__"))
    ]:
        del swapped[key]
    swapped[f"{inner}[1].path"] = "/data/changed"
    assert merge_form(data, swapped)["stages"] == data["stages"][::-1]
