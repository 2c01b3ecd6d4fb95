"""Every error of a config at once: each bad key or value is its own ``path: message`` line (the
wording of the one-error case), the CLI prints them all and exits 2, and a config with one
error still raises that one ConfigError as before."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_configs import dry_run

from rft_core.config import load_config, load_config_from_dict
from rft_core.errors import ConfigError, ConfigErrors

FOUR_BAD = """\
mode: both
project: p
name: n
checkpoint_root_dir: {root}
model:
  model_path: {root}/model
algorithm:
  algorithm_type: grpo
  optimizer:
    lr: 3e-5x
buffer:
  batch_sise: 4
  batch_size: -4
  total_steps: ten
  explorer_input:
    taskset:
      path: {root}/data
"""


def _four_bad(tmp_path: Path) -> Path:
    path = tmp_path / "four_bad.yaml"
    path.write_text(FOUR_BAD.format(root=tmp_path))
    return path


def test_four_bad_values_are_four_errors_each_naming_its_path(tmp_path):
    with pytest.raises(ConfigErrors) as info:
        load_config(_four_bad(tmp_path))
    lines = [str(e) for e in info.value.errors]
    assert lines == [
        "algorithm.optimizer.lr: must be a number, got '3e-5x' (str)",
        "buffer.batch_sise: unknown key 'batch_sise' (did you mean 'batch_size'?); allowed keys "
        "here: batch_size, train_batch_size, total_epochs, total_steps, explorer_input, "
        "trainer_input, max_retry_times, max_retry_interval",
        "buffer.total_steps: must be an integer, got 'ten' (str)",
        "buffer.batch_size: must be >= 1, got -4",
    ]
    # the first error is also the error's own path and message (callers that handle one)
    assert info.value.path == "algorithm.optimizer.lr"
    assert str(info.value).splitlines() == lines


def test_one_bad_value_raises_that_one_error_unchanged():
    with pytest.raises(ConfigError) as info:
        load_config_from_dict(
            {
                "model": {"model_path": "m"},
                "buffer": {"batch_size": -4, "explorer_input": {"taskset": {"path": "d"}}},
            }
        )
    assert type(info.value) is ConfigError
    assert str(info.value) == "buffer.batch_size: must be >= 1, got -4"


def test_a_range_error_does_not_repeat_in_the_values_derived_from_it():
    data = {
        "model": {"model_path": "m"},
        "algorithm": {"repeat_times": 0, "optimizer": {"lr": -1.0}},
        "buffer": {"batch_size": 0, "explorer_input": {"taskset": {"path": "d"}}},
    }
    with pytest.raises(ConfigErrors) as info:
        load_config_from_dict(data)
    assert [e.path for e in info.value.errors] == [
        "algorithm.repeat_times",
        "algorithm.optimizer.lr",
        "buffer.batch_size",
    ]  # not buffer.train_batch_size, which is derived from them


def test_errors_of_two_stages_are_reported_under_each_stage():
    data = {
        "model": {"model_path": "m"},
        "buffer": {"explorer_input": {"taskset": {"path": "d"}}},
        "stages": [
            {"stage_name": "a", "buffer": {"batch_size": -1, "explorer_input": {"taskset": {"path": "d"}}}},
            {"stage_name": "b", "algorithm": {"algorithm_type": "grpo", "optimizer": {"lr": 0}}},
        ],
    }  # fmt: skip
    with pytest.raises(ConfigErrors) as info:
        load_config_from_dict(data)
    assert [str(e) for e in info.value.errors] == [
        "stages[0].buffer.batch_size: must be >= 1, got -1",
        "stages[1].algorithm.optimizer.lr: must be > 0, got 0.0",
    ]


def test_several_errors_survive_pickling_as_ray_sends_them(tmp_path):
    import pickle

    with pytest.raises(ConfigErrors) as info:
        load_config(_four_bad(tmp_path))
    back = pickle.loads(pickle.dumps(info.value))
    assert [str(e) for e in back.errors] == [str(e) for e in info.value.errors]


def test_trinity_run_dry_run_prints_every_error_and_exits_2(tmp_path):
    proc = dry_run(_four_bad(tmp_path), timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert [line.split(": ")[2] for line in lines] == [
        "algorithm.optimizer.lr",
        "buffer.batch_sise",
        "buffer.total_steps",
        "buffer.batch_size",
    ], proc.stderr
    assert all(line.startswith("trinity run: error: ") for line in lines)
    assert lines[3] == "trinity run: error: buffer.batch_size: must be >= 1, got -4"
    assert proc.stdout == ""
