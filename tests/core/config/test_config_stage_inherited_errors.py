"""A global value every stage inherits is one problem, said once (issue 31): the demo config
(two stages, neither writing ``model``) with an empty ``model.model_path`` gets one line at
``model.model_path`` naming both stages, from the loader and from ``trinity run``, not one
line a stage."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from run_configs import dry_run

from rft_core.config import load_config_from_dict
from rft_core.errors import ConfigError

DEMO = Path(__file__).resolve().parents[3] / "examples" / "demo" / "grpo_demo.yaml"
REQUIRED = (
    "required: a Hugging Face model directory (e.g. made by `trinity init-demo`) or a model "
    "name in the offline cache (inherited by stages 'sft_warmup', 'rft')"
)


def _demo_without_model_path() -> dict:
    data = yaml.safe_load(DEMO.read_text())
    data["model"]["model_path"] = ""
    return data


def test_an_empty_model_path_is_one_error_naming_both_stages():
    with pytest.raises(ConfigError) as info:
        load_config_from_dict(_demo_without_model_path())
    assert [(e.path, e.message) for e in info.value.errors] == [("model.model_path", REQUIRED)]


def test_trinity_run_prints_it_once(tmp_path):
    config = tmp_path / "empty_model_path.yaml"
    config.write_text(yaml.safe_dump(_demo_without_model_path()))
    done = dry_run(config)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert errors == [f"trinity run: error: model.model_path: {REQUIRED}"]
