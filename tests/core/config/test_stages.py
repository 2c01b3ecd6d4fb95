"""Stages (rft_core.config.stages): a stage that trains on a dataset keeps the run's global eval
tasksets for its trainer's held-out eval; every other stage's buffer replaces the global one."""

from __future__ import annotations

import pytest
from run_configs import minimal_config, sft_stage

from rft_core.config import load_config_from_dict, resolve_stages
from rft_core.config.stages import evaluates_in_trainer
from rft_core.errors import ConfigError

HELD_OUT = {
    "name": "held-out",
    "path": "/data/held-out",
    "format": {"prompt_key": "question", "response_key": "answer"},
}


def _staged(**sft_trainer) -> dict:
    """The minimal config with an eval taskset and an SFT stage, a stage with its own buffer and
    a stage without one; ``sft_trainer``: the SFT stage's trainer section."""
    d = minimal_config()
    d["buffer"]["explorer_input"]["eval_tasksets"] = [HELD_OUT]
    d["buffer"]["explorer_input"]["default_workflow_type"] = "math_boxed_workflow"
    sft = sft_stage("/d/sft.jsonl")
    if sft_trainer:
        sft["trainer"] = sft_trainer
    own = {"stage_name": "own", "buffer": dict(d["buffer"], explorer_input={})}
    own["buffer"]["explorer_input"] = {"taskset": d["buffer"]["explorer_input"]["taskset"]}
    d["stages"] = [sft, own, {"stage_name": "rft"}]
    return d


def test_an_sft_stage_keeps_the_global_eval_tasksets_and_other_stages_their_own_buffer():
    sft, own, rft = resolve_stages(load_config_from_dict(_staged()))
    ei = sft.buffer.explorer_input
    assert [t.name for t in ei.eval_tasksets] == ["held-out"]
    assert ei.all_tasksets == []  # the eval tasksets only, not the training ones
    (held_out,) = ei.eval_tasksets
    # derived by the global explorer_input's defaults; errors name where it was written
    assert held_out.default_workflow_type == "math_boxed_workflow"
    assert held_out._yaml_path == "buffer.explorer_input.eval_tasksets[0]"
    assert own.buffer.explorer_input.eval_tasksets == []  # a stage with an explorer: Trinity's rule
    assert [t.name for t in rft.buffer.explorer_input.eval_tasksets] == ["held-out"]
    assert evaluates_in_trainer(sft)
    assert not evaluates_in_trainer(own) and not evaluates_in_trainer(rft)  # their explorer does


def test_sft_eval_interval_0_turns_the_trainer_eval_off_and_a_negative_one_is_refused():
    sft = resolve_stages(load_config_from_dict(_staged(sft_eval_interval=0)))[0]
    assert sft.buffer.explorer_input.eval_tasksets and not evaluates_in_trainer(sft)
    with pytest.raises(ConfigError) as info:
        resolve_stages(load_config_from_dict(_staged(sft_eval_interval=-1)))
    assert "stages[0].trainer.sft_eval_interval" in str(info.value)
    assert "must be >= 0" in str(info.value)
