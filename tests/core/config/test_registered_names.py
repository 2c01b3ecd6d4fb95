"""The committed table of registered names (rft_core/config/registered_names.json), which the
web process checks configs against without importing torch, matches the live registries; and
the check gives the same verdicts from the table as from the registries."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from rft_core.algorithms.kl import KL_FNS
from rft_core.buffer import BUFFERS
from rft_core.config import check_registered_names, load_config_from_dict
from rft_core.config.committed_names import REGISTERED_NAMES_FILE, committed_registered_names
from rft_core.config.schema import (
    AlgorithmConfig,
    ExperienceBufferConfig,
    MonitorConfig,
    RolloutModelConfig,
)
from rft_core.errors import ConfigError
from rft_core.monitor import MONITORS
from rft_core.registries import registered_names_table
from rft_core.rollout import ENGINES


def _built_in_table_text() -> str:
    """The table as a fresh process builds it: the built-in entries only (test modules of this
    session register rewards of their own in the live registries)."""
    code = (
        "from rft_core.registries import registered_names_text; "
        "print(registered_names_text(), end='')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout


def test_the_committed_table_matches_the_live_registries():
    built_in = json.loads(_built_in_table_text())
    assert committed_registered_names() == built_in, (
        f"{REGISTERED_NAMES_FILE} is stale; run `python -m rft_core.registries`"
    )
    # and this process's live table holds at least those names (plus what tests registered)
    live = json.loads(json.dumps(registered_names_table()))
    assert set(built_in["reward_fns"]) <= set(live["reward_fns"])


def test_the_committed_table_keeps_the_registries_order():
    # the choices and the web form's argument fields list names in the table's order
    assert REGISTERED_NAMES_FILE.read_text() == _built_in_table_text(), (
        f"{REGISTERED_NAMES_FILE} is stale; run `python -m rft_core.registries`"
    )


def _choices(cls: type, name: str) -> list[str]:
    return next(f for f in dataclasses.fields(cls) if f.name == name).metadata["choices"]


def test_the_plug_in_fields_choices_are_the_registries_names():
    assert _choices(AlgorithmConfig, "kl_loss_fn") == KL_FNS.names()
    assert _choices(AlgorithmConfig, "kl_penalty_fn") == KL_FNS.names()
    assert _choices(ExperienceBufferConfig, "storage_type") == BUFFERS.names()
    assert _choices(RolloutModelConfig, "engine_type") == ENGINES.names()
    assert _choices(MonitorConfig, "monitor_type") == MONITORS.names()
    assert MONITORS.names() == ["tensorboard", "wandb", "mlflow", "none"]  # the default first
    assert KL_FNS.names() == ["none", "k1", "k2", "k3", "low_var_kl"]  # the order stated
    assert BUFFERS.names() == ["queue", "file", "sql"]


def test_reading_the_committed_table_imports_no_torch():
    code = (
        "import sys\n"
        "from rft_core.config.committed_names import committed_registered_names\n"
        "t = committed_registered_names()\n"
        "assert 'math_workflow' in t['workflows'] and 'grpo' in t['advantage_fns']\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _config(**algorithm) -> dict:
    return {
        "model": {"model_path": "m", "max_model_len": 64},
        "algorithm": {"algorithm_type": "grpo", **algorithm},
        "buffer": {"batch_size": 2, "explorer_input": {"taskset": {"name": "t", "path": "d"}}},
    }


@pytest.mark.parametrize(
    ("algorithm", "path", "text"),
    [
        ({"advantage_fn": "grpoo"}, "algorithm.advantage_fn", "unknown advantage function 'grpoo'"),
        ({"advantage_fn_args": {"epsilonn": 1}}, "algorithm.advantage_fn_args.epsilonn", "did you mean 'epsilon'"),
        ({"policy_loss_fn_args": {"clip_rang": 1}}, "algorithm.policy_loss_fn_args.clip_rang", "did you mean 'clip_range'"),
        # a number argument given text fails here, not as a TypeError in the first step
        ({"policy_loss_fn_args": {"clip_range": "x"}}, "algorithm.policy_loss_fn_args.clip_range", "must be a number (default 0.2), got 'x'"),
        ({"algorithm_type": "sapo", "policy_loss_fn_args": {"tau_pos": "fast"}}, "algorithm.policy_loss_fn_args.tau_pos", "must be a number (default 1.0), got 'fast'"),
        ({"advantage_fn_args": {"epsilon": [1]}}, "algorithm.advantage_fn_args.epsilon", "must be a number"),
    ],
)  # fmt: skip
def test_the_table_and_the_registries_refuse_alike(algorithm, path, text):
    errors = []
    for table in (registered_names_table(), committed_registered_names()):
        with pytest.raises(ConfigError) as err:
            check_registered_names(load_config_from_dict(_config(**algorithm)), table)
        errors.append(str(err.value))
        assert err.value.path == path and text in err.value.message
    assert errors[0] == errors[1]


def test_a_number_argument_written_as_text_is_read_as_the_number():
    cfg = load_config_from_dict(_config(advantage_fn_args={"epsilon": "1e-5"}))
    check_registered_names(cfg, registered_names_table())
    assert cfg.algorithm.advantage_fn_args["epsilon"] == 1e-5
