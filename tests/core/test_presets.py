"""algorithm_type presets: the defaults users of Trinity expect, and consistency with the
registries they name."""

from __future__ import annotations

import pytest

from rft_core.algorithms.advantages import get_advantage_fn
from rft_core.algorithms.aggregation import LOSS_AGG_MODES
from rft_core.algorithms.kl import get_kl_fn
from rft_core.algorithms.policy_losses import POLICY_LOSSES as POLICY_LOSS_FNS
from rft_core.algorithms.presets import ALGORITHM_TYPES, get_preset
from rft_core.errors import ConfigError


def test_grpo_defaults():
    p = get_preset("GRPO")
    assert (p.advantage_fn, p.policy_loss_fn) == ("grpo", "ppo")
    assert (p.kl_loss_fn, p.kl_coef, p.entropy_coef) == ("k2", 0.001, 0.0)
    assert p.loss_agg_mode == "token-mean" and p.kl_penalty_fn == "none"
    assert p.use_reference and not p.use_critic and p.use_rollout
    # a real group by default, not Trinity's silent group of one
    assert p.group_algorithm and p.repeat_times >= 2
    assert p.policy_loss_fn_args == {"clip_range": 0.2, "clip_ratio_c": 3.0}


def test_roles_per_algorithm():
    assert get_preset("ppo").use_critic and get_preset("ppo").compute_advantage_in_trainer
    assert get_preset("rloo").group_algorithm
    assert not get_preset("reinforceplusplus").group_algorithm
    sft, dpo = get_preset("sft"), get_preset("dpo")
    assert not sft.use_rollout and not sft.use_reference and sft.advantage_fn is None
    assert not dpo.use_rollout and dpo.use_reference and dpo.schema == "dpo"


@pytest.mark.parametrize("name", ALGORITHM_TYPES)
def test_every_preset_names_registered_parts(name):
    p = get_preset(name)
    if p.advantage_fn is not None:
        entry = get_advantage_fn(p.advantage_fn)
        assert entry.needs_values == p.use_critic
        assert (entry.level == "token") == p.compute_advantage_in_trainer
    get_kl_fn(p.kl_loss_fn)
    get_kl_fn(p.kl_penalty_fn)
    assert p.policy_loss_fn in POLICY_LOSS_FNS
    assert p.loss_agg_mode in LOSS_AGG_MODES


def test_presets_are_copies():
    p = get_preset("grpo")
    p.advantage_fn_args["epsilon"] = 1.0
    p.repeat_times = 1
    assert get_preset("grpo").advantage_fn_args == {"epsilon": 1e-6}
    assert get_preset("grpo").repeat_times == 8


def test_unknown_algorithm_lists_valid_names():
    with pytest.raises(ConfigError) as err:
        get_preset("gpro")
    assert err.value.path == "algorithm.algorithm_type"
    for name in ("grpo", "ppo", "rloo", "reinforceplusplus", "sft", "dpo"):
        assert name in str(err.value)
