"""mix / mix_chord configs: Trinity's mix_chord example resolves with its expert dataset and
Trinity's defaults; settings no mix algorithm reads are warned about with their YAML path."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rft_core.algorithms.settings import AlgorithmSettings
from rft_core.config import load_config, load_config_from_dict
from rft_core.config.expert_data import expert_buffer_config, expert_rows_per_step
from rft_core.errors import ConfigError

MIX_CHORD = Path(__file__).parents[1] / "trinity_configs" / "mix_chord.yaml"


def test_mix_chord_config_resolves_the_expert_data(caplog):
    with caplog.at_level(logging.WARNING, logger="rft_core.config"):
        cfg = load_config(MIX_CHORD)
    algo = AlgorithmSettings.resolve(cfg.algorithm)
    assert (algo.policy_loss_fn, algo.advantage_fn, algo.kl_coef) == ("mix_chord", "grpo", 0.0)
    assert algo.policy_loss_args["mu_peak"] == 0.5 and algo.policy_loss_args["mu_valley"] == 0.02
    # 320 per step: ceil(0.2 x 320) = 64 expert rows + 256 = 32 tasks x 8 rollouts
    assert expert_rows_per_step(cfg) == 64
    eb, passes = expert_buffer_config(cfg)
    assert eb.path == "/PATH/TO/SFT_DATASET" and eb.format.messages_key == "messages"
    assert eb._yaml_path == "buffer.trainer_input.auxiliary_buffers.sft_dataset"
    assert passes == {"total_epochs": 25, "total_steps": None}
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "auxiliary_buffers" not in warned and "sample_strategy_args" not in warned


def _mix(**over):
    raw = {
        "mode": "both",
        "model": {"model_path": "m"},
        "algorithm": {"algorithm_type": "mix", "repeat_times": 2},
        "buffer": {
            "batch_size": 2,
            "train_batch_size": 6,
            "explorer_input": {"taskset": {"path": "tasks.jsonl"}},
            "trainer_input": {
                "auxiliary_buffers": {"sft_dataset": {"path": "sft.jsonl", "total_epochs": 3}}
            },
        },
    }
    for section, values in over.items():
        raw[section] = {**raw[section], **values}
    return raw


def test_mix_defaults_to_half_expert_rows_and_needs_the_expert_dataset():
    cfg = load_config_from_dict(_mix())
    assert expert_rows_per_step(cfg) == 3  # Trinity's expert_data_ratio 0.5: ceil(0.5 x 6)
    assert AlgorithmSettings.resolve(cfg.algorithm).policy_loss_args == {
        "mu": 0.1,
        "clip_range": 0.2,
    }
    raw = _mix()
    raw["buffer"]["trainer_input"] = {}
    with pytest.raises(ConfigError) as info:
        load_config_from_dict(raw)
    assert info.value.path == "buffer.trainer_input.auxiliary_buffers.sft_dataset"
    with pytest.raises(ConfigError) as info:
        load_config_from_dict(_mix(algorithm={"algorithm_type": "mix", "repeat_times": 2,
                                              "sample_strategy_args": {"expert_data_ratio": 1.0}}))  # fmt: skip
    assert info.value.path == "algorithm.sample_strategy_args.expert_data_ratio"


def test_rollout_rows_beside_the_expert_rows_must_fit_an_explorer_step():
    # 2 tasks x 2 rollouts = 4 per explorer step; 10 per step with 5 expert rows leaves 5 > 4
    with pytest.raises(ConfigError, match="5 rollout experiences per trainer step"):
        load_config_from_dict(_mix(buffer={**_mix()["buffer"], "train_batch_size": 10}))


def test_settings_no_mix_algorithm_reads_are_warned_with_their_path(caplog):
    raw = _mix()
    raw["algorithm"]["sample_strategy_args"] = {"expert_data_ratio": 0.5, "warmup": 3}
    raw["buffer"]["trainer_input"]["auxiliary_buffers"]["other"] = {"path": "x"}
    raw["buffer"]["trainer_input"]["auxiliary_buffers"]["sft_dataset"]["schema_type"] = "sft"
    with caplog.at_level(logging.WARNING, logger="rft_core.config"):
        load_config_from_dict(raw)
    warned = {r.getMessage().split(" = ")[0] for r in caplog.records}
    assert {
        "algorithm.sample_strategy_args.warmup",
        "buffer.trainer_input.auxiliary_buffers.other",
        "buffer.trainer_input.auxiliary_buffers.sft_dataset.schema_type",
    } <= warned
    caplog.clear()
    raw = _mix(algorithm={"algorithm_type": "grpo", "repeat_times": 2})
    raw["buffer"]["train_batch_size"] = 4
    with caplog.at_level(logging.WARNING, logger="rft_core.config"):
        load_config_from_dict(raw)
    warned = {r.getMessage().split(" = ")[0] for r in caplog.records}
    assert "buffer.trainer_input.auxiliary_buffers.sft_dataset" in warned


def test_a_missing_expert_dataset_is_reported_before_the_run_starts(tmp_path):
    from rft_core.data.run_datasets import read_run_datasets

    raw = _mix()
    raw["buffer"]["explorer_input"]["taskset"]["path"] = str(tmp_path / "tasks.jsonl")
    (tmp_path / "tasks.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    raw["buffer"]["explorer_input"]["taskset"]["format"] = {
        "prompt_key": "question",
        "response_key": "answer",
    }
    raw["buffer"]["trainer_input"]["auxiliary_buffers"]["sft_dataset"]["path"] = str(
        tmp_path / "no_such_sft.jsonl"
    )
    _, problems = read_run_datasets(load_config_from_dict(raw))
    assert len(problems) == 1
    assert problems[0].startswith("buffer.trainer_input.auxiliary_buffers.sft_dataset")
