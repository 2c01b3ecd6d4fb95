"""algorithm_type presets: the defaults users of Trinity expect, and consistency with the
registries they name."""

from __future__ import annotations

import pytest

from rft_core.algorithms.advantages import get_advantage_fn
from rft_core.algorithms.aggregation import LOSS_AGG_MODES
from rft_core.algorithms.kl import get_kl_fn
from rft_core.algorithms.policy_losses import POLICY_LOSSES as POLICY_LOSS_FNS
from rft_core.config.presets import ALGORITHM_TYPES, get_preset
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
        # token-level fns run in the trainer; a group fn too for grpo_verl (Trinity's GRPOverl)
        in_trainer = entry.level == "token" or name == "grpo_verl"
        assert in_trainer == p.compute_advantage_in_trainer
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


@pytest.mark.parametrize(
    ("name", "advantage_fn", "policy_loss_fn", "kl_loss_fn", "loss_args"),
    [
        # Trinity-RFT trinity/algorithm/algorithm.py default_config() and each fn's default_args()
        ("opmd", "opmd", "opmd", "k2", {"tau": 1.0}),
        ("gspo", "grpo", "gspo", "k2", {"clip_range_low": 3e-4, "clip_range_high": 4e-4}),
        ("cispo", "grpo", "cispo", "k2", {"clip_range_low": 1.0, "clip_range_high": 0.28}),
        ("topr", "reinforce", "topr", "k2", {"advantage_threshold": 0.0}),
        ("sppo", "opmd", "sppo", "none", {"epsilon": 0.3}),
        ("asymre", "asymre", "opmd", "none", {"tau": 1.0}),
        ("rec", "rec", "rec", "k2", None),
    ],
)
def test_trinity_family_presets(name, advantage_fn, policy_loss_fn, kl_loss_fn, loss_args):
    p = get_preset(name)
    assert (p.advantage_fn, p.policy_loss_fn, p.kl_loss_fn) == (
        advantage_fn,
        policy_loss_fn,
        kl_loss_fn,
    )
    assert not p.use_critic and p.use_rollout and not p.compute_advantage_in_trainer
    if loss_args is not None:
        assert p.policy_loss_fn_args == loss_args
    # a group-relative advantage needs a real group
    assert p.group_algorithm == (advantage_fn != "reinforce") and p.repeat_times >= 2
    expected_agg = "seq-mean-token-mean" if name == "gspo" else "token-mean"
    assert p.loss_agg_mode == expected_agg


def test_asymre_and_rec_trinity_args():
    assert get_preset("asymre").advantage_fn_args == {"baseline_shift": -0.1}
    assert get_preset("opmd").advantage_fn_args == {"opmd_baseline": "mean", "tau": 1.0}
    rec = get_preset("rec")
    assert rec.advantage_fn_args == {"epsilon": 1e-6, "std_normalize": False, "drop": None}
    assert rec.policy_loss_fn_args["clip_mode"] == "none"
    assert rec.policy_loss_fn_args["epsilon_high_prime"] == 2.0


@pytest.mark.parametrize("name", ["on_policy_distill", "jsd"])
def test_trinity_algorithms_we_lack_are_refused_as_such(name):
    with pytest.raises(ConfigError) as err:
        get_preset(name)
    message = str(err.value)
    assert (
        f"'{name}' (" in message
        and "is a Trinity-RFT algorithm that RFT Studio does not" in message
    )
    assert "did you mean" not in message and "implemented: grpo, rloo" in message


def test_round_two_presets_carry_trinitys_defaults():
    # trinity/algorithm/algorithm.py (agentscope-ai/Trinity-RFT) and each fn's default_args
    sapo = get_preset("sapo")
    assert (sapo.advantage_fn, sapo.policy_loss_fn) == ("grpo", "sapo")
    assert sapo.policy_loss_fn_args == {"tau_pos": 1.0, "tau_neg": 1.05}
    m2po = get_preset("m2po")
    assert m2po.policy_loss_fn_args == {"m2_threshold": 0.04, "log_ratio_clip": 20.0}
    assert m2po.loss_agg_mode == "token-mean"
    raft = get_preset("raft")
    assert (raft.policy_loss_fn, raft.kl_loss_fn, raft.use_reference) == ("sft", "none", False)
    assert raft.use_rollout and raft.schema == "experience"
    msg = get_preset("multi_step_grpo")
    assert msg.advantage_fn == "step_wise_grpo" and msg.repeat_times == 8
    assert msg.advantage_fn_args == {
        "epsilon": 1e-6,
        "enable_step_norm": False,
        "std_cal_level": "group",
        "std_threshold": None,
    }
    gigpo = get_preset("gigpo")
    assert gigpo.advantage_fn_args == {"omega": 1.0, "gamma": 1.0, "fnorm": "none", "epsilon": 1e-6}
    assert (
        gigpo.policy_loss_fn_args["clip_range_low"]
        == gigpo.policy_loss_fn_args["clip_range_high"]
        == 0.2
    )
    verl = get_preset("grpo_verl")
    assert verl.advantage_fn == "grpo" and verl.compute_advantage_in_trainer


def test_grpo_verl_computes_group_advantages_in_the_trainer():
    from rft_core.algorithms.settings import AlgorithmSettings
    from rft_core.config.schema import AlgorithmConfig

    verl = AlgorithmSettings.resolve(AlgorithmConfig(algorithm_type="grpo_verl"))
    grpo = AlgorithmSettings.resolve(AlgorithmConfig(algorithm_type="grpo"))
    assert not verl.advantages_in_explorer and grpo.advantages_in_explorer


def test_a_misspelt_algorithm_gets_a_close_hint_only():
    with pytest.raises(ConfigError, match="did you mean 'gspo'"):
        get_preset("gsop")
    with pytest.raises(ConfigError) as err:
        get_preset("totally_new_rl")
    assert "did you mean" not in str(err.value)
    with pytest.raises(ConfigError, match="DAPO is algorithm_type grpo with"):
        get_preset("dapo")


def test_a_swap_of_two_letters_is_closer_than_two_edits():
    # 'gpro' is as similar to 'gspo' as to 'grpo' by difflib's ratio (0.75 each), but one swap
    # away from grpo and two edits (insert s, drop r) from gspo
    with pytest.raises(ConfigError, match="did you mean 'grpo'"):
        get_preset("gpro")
