"""Advantage functions against numbers worked by hand (the working is in the comments)."""

from __future__ import annotations

import math

import pytest
import torch

from rft_core.algorithms.advantages import (
    ADVANTAGE_FNS,
    asymre_advantages,
    gae_advantages,
    get_advantage_fn,
    grpo_advantages,
    opmd_advantages,
    outcome_to_token_rewards,
    rec_advantages,
    register_advantage_fn,
    reinforce_plus_plus_advantages,
    rloo_advantages,
)
from rft_core.errors import ConfigError, RFTError


def test_grpo_normalises_within_each_group_with_unbiased_std():
    # group a = [1, 0, 0, 1]: mean 0.5; squared deviations 4 × 0.25 = 1; unbiased var 1/3,
    #   std = 0.5773503; A = ±0.5 / (0.5773503 + 1e-6) = ±0.8660239
    # group b = [0.5]: a group of one keeps its raw reward 0.5
    # group c = [2, 2]: std 0 -> A = 0 / (0 + 1e-6) = 0 (kept: no threshold given)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 2.0, 2.0])
    ids = ["a", "a", "a", "a", "b", "c", "c"]
    adv, keep = grpo_advantages(rewards, ids)
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    assert adv.tolist() == pytest.approx([a, -a, -a, a, 0.5, 0.0, 0.0], abs=1e-6)
    assert keep.tolist() == [True] * 7


def test_grpo_groups_by_id_not_by_position():
    # x = [1, 3] (mean 2, std sqrt(2) = 1.4142136), y = [10, 10] (std 0 -> 0)
    # A_x = ±1 / (1.4142136 + 1e-6) = ±0.7071063
    adv, _ = grpo_advantages(torch.tensor([1.0, 10.0, 3.0, 10.0]), ["x", "y", "x", "y"])
    assert adv.tolist() == pytest.approx([-0.7071063, 0.0, 0.7071063, 0.0], abs=1e-6)


def test_grpo_std_threshold_drops_flat_groups():
    # threshold 0: group c ([2, 2], std 0 <= 0) is dropped -> keep False, advantage 0.
    # The group of one is never dropped (its std is undefined).
    rewards = torch.tensor([1.0, 0.0, 0.5, 2.0, 2.0])
    adv, keep = grpo_advantages(rewards, ["a", "a", "b", "c", "c"], std_threshold=0.0)
    assert keep.tolist() == [True, True, True, False, False]
    # a = [1, 0]: mean 0.5, std sqrt(0.5) = 0.7071068 -> ±0.5 / 0.7071078 = ±0.7071058
    assert adv.tolist() == pytest.approx([0.7071058, -0.7071058, 0.5, 0.0, 0.0], abs=1e-6)


def test_grpo_batch_std_level():
    # batch [1, 0, 3, 5]: mean 2.25; squared deviations 1.5625 + 5.0625 + 0.5625 + 7.5625 = 14.75
    #   unbiased var 14.75 / 3 = 4.9166667, std 2.2173558
    # group a = [1, 0] mean 0.5: ±0.5 / 2.2173568 = ±0.2254939
    # group b = [3, 5] mean 4:   ±1   / 2.2173568 = ±0.4509877
    rewards = torch.tensor([1.0, 0.0, 3.0, 5.0])
    adv, _ = grpo_advantages(rewards, ["a", "a", "b", "b"], std_cal_level="batch")
    assert adv.tolist() == pytest.approx([0.2254939, -0.2254939, -0.4509877, 0.4509877], abs=1e-6)
    with pytest.raises(ConfigError, match="std_cal_level"):
        grpo_advantages(rewards, ["a", "a", "b", "b"], std_cal_level="global")


def test_rloo_uses_leave_one_out_baseline():
    # [1, 0, 0, 1]: A_0 = 1 - (0 + 0 + 1)/3 = 2/3; A_1 = 0 - (1 + 0 + 1)/3 = -2/3
    # single [0.25] keeps 0.25
    adv = rloo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 0.25]), ["g"] * 4 + ["s"])
    assert adv.tolist() == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3, 0.25], abs=1e-6)


def test_outcome_reward_lands_on_last_response_token():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    out = outcome_to_token_rewards(torch.tensor([1.0, 2.0, 3.0]), mask)
    assert out.tolist() == [[0.0, 1.0, 0.0], [0.0, 0.0, 2.0], [0.0, 0.0, 0.0]]


def test_reinforce_plus_plus_whitens_returns_over_the_batch():
    # gamma 1: returns-to-go row0 = [1, 1, 1]; row1 = [2, 2, 0] (the masked 3rd token is 0 and
    # the running return restarts there).
    # unmasked values 1, 1, 1, 2, 2: mean 1.4; squared devs 3 × 0.16 + 2 × 0.36 = 1.2;
    # unbiased var 0.3, std 0.5477226 -> -0.4/0.5477226 = -0.7302967, 0.6/0.5477226 = 1.0954451
    token_rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv = reinforce_plus_plus_advantages(token_rewards, mask, gamma=1.0)
    lo, hi = -0.7302967, 1.0954451
    assert adv.flatten().tolist() == pytest.approx([lo, lo, lo, hi, hi, 0.0], abs=1e-5)
    # gamma 0.5: row0 = [0.25, 0.5, 1], row1 = [1, 2, 0]; mean of (0.25, .5, 1, 1, 2) = 0.95;
    # squared devs .49 + .2025 + .0025 + .0025 + 1.1025 = 1.8, var .45, std 0.6708204;
    # first token: (0.25 - 0.95) / 0.6708204 = -1.0434984
    adv = reinforce_plus_plus_advantages(token_rewards, mask, gamma=0.5)
    assert adv[0, 0].item() == pytest.approx(-1.0434984, abs=1e-5)


def test_gae_matches_hand_recursion():
    # gamma 0.9, lam 0.8, V = 0.5 everywhere, reward 1 on the last token:
    # t2: δ = 1 + 0 - 0.5 = 0.5, A2 = 0.5
    # t1: δ = 0 + 0.9·0.5 - 0.5 = -0.05, A1 = -0.05 + 0.72·0.5 = 0.31
    # t0: δ = -0.05, A0 = -0.05 + 0.72·0.31 = 0.1732
    # returns = A + V = [0.6732, 0.81, 1.0]
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.5, 0.5]])
    mask = torch.ones(1, 3)
    adv, ret = gae_advantages(rewards, values, mask, gamma=0.9, lam=0.8, whiten=False)
    assert adv.tolist()[0] == pytest.approx([0.1732, 0.31, 0.5], abs=1e-6)
    assert ret.tolist()[0] == pytest.approx([0.6732, 0.81, 1.0], abs=1e-6)


def test_gae_skips_masked_tokens_and_whitens():
    # Row with mask [1, 1, 0], a bogus value 9 on the masked token: it must not leak.
    # t1: δ = 1 + 0.9·0 - 0.5 = 0.5 -> A1 = 0.5; t0: δ = 0 + 0.45 - 0.5 = -0.05,
    # A0 = -0.05 + 0.72·0.5 = 0.31; masked A2 = 0.
    rewards = torch.tensor([[0.0, 1.0, 0.0]])
    values = torch.tensor([[0.5, 0.5, 9.0]])
    mask = torch.tensor([[1, 1, 0]])
    adv, ret = gae_advantages(rewards, values, mask, gamma=0.9, lam=0.8, whiten=False)
    assert adv.tolist()[0] == pytest.approx([0.31, 0.5, 0.0], abs=1e-6)
    assert ret.tolist()[0][:2] == pytest.approx([0.81, 1.0], abs=1e-6)
    # whitened over the two unmasked values (0.31, 0.5): mean 0.405, unbiased var 0.01805,
    # std 0.1343503 -> ∓0.095/0.1343503 = ∓0.7071068; the masked token stays 0.
    adv, _ = gae_advantages(rewards, values, mask, gamma=0.9, lam=0.8)
    assert adv.tolist()[0] == pytest.approx([-0.7071068, 0.7071068, 0.0], abs=1e-4)


def test_registry_entries_and_errors():
    assert {"grpo", "rloo", "reinforceplusplus", "ppo", "gae"} <= set(ADVANTAGE_FNS.names())
    grpo = get_advantage_fn("grpo")
    assert grpo.level == "group" and not grpo.needs_values
    assert get_advantage_fn("ppo").needs_values
    # The uniform group call gives rloo an all-True keep mask.
    adv, keep = get_advantage_fn("rloo").group(torch.tensor([1.0, 0.0]), ["g", "g"])
    assert adv.tolist() == [1.0, -1.0] and keep.tolist() == [True, True]
    with pytest.raises(ConfigError) as err:
        get_advantage_fn("grpoo")
    assert err.value.path == "algorithm.advantage_fn"
    assert "did you mean 'grpo'" in str(err.value) and "rloo" in str(err.value)
    with pytest.raises(RFTError, match="already registered"):
        register_advantage_fn("grpo", "group")(lambda r, g: r)


def test_filtered_groups_are_dropped_or_kept_masked_for_a_waiting_trainer():
    from rft_core.experience import Experience
    from rft_core.explorer.explorer import apply_group_advantages

    def batch():
        # group a: rewards 1, 0 (std 0.71, kept); group b: 1, 1 (std 0, filtered at 0.0)
        return [
            Experience(prompt_ids=[1], response_ids=[2, 3], reward=r, group_id=g)
            for g, r in (("a", 1.0), ("a", 0.0), ("b", 1.0), ("b", 1.0))
        ]

    fn, args = get_advantage_fn("grpo"), {"std_threshold": 0.0}
    dropped = apply_group_advantages(batch(), fn, args)
    assert [e.group_id for e in dropped] == ["a", "a"]
    assert dropped[0].advantage == pytest.approx(0.5 / (0.5**0.5 + 1e-6))
    kept = apply_group_advantages(batch(), fn, args, keep_filtered=True)
    assert [e.group_id for e in kept] == ["a", "a", "b", "b"]
    assert [e.advantage for e in kept[2:]] == [0.0, 0.0]
    assert [e.action_mask for e in kept] == [[], [], [0, 0], [0, 0]]


def test_opmd_subtracts_the_group_mean_or_its_soft_maximum():
    # mean baseline: a = [1, 0, 0, 1] -> 0.5 -> [0.5, -0.5, -0.5, 0.5] (no std division);
    # the group of one b = [0.5] keeps its raw reward (baseline 0, as Trinity)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5])
    ids = ["a", "a", "a", "a", "b"]
    adv = opmd_advantages(rewards, ids)
    assert adv.tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5, 0.5])
    # logavgexp, tau 1, [1, 0]: b = log((e + 1) / 2) = log 1.8591409 = 0.6201145
    adv = opmd_advantages(torch.tensor([1.0, 0.0]), ["a", "a"], opmd_baseline="logavgexp")
    assert adv.tolist() == pytest.approx([0.3798855, -0.6201145], abs=1e-6)
    # tau 0.5: b = 0.5·log((e² + 1) / 2) = 0.5·log 4.1945280 = 0.5·1.4337808 = 0.7168904
    adv = opmd_advantages(torch.tensor([1.0, 0.0]), ["a", "a"], opmd_baseline="logavgexp", tau=0.5)
    assert adv.tolist() == pytest.approx([0.2831096, -0.7168904], abs=1e-6)
    with pytest.raises(ConfigError, match="opmd_baseline"):
        opmd_advantages(rewards, ids, opmd_baseline="median")


def test_asymre_shifts_the_baseline():
    # baseline_shift -0.1: [1, 0, 0, 1] -> baseline 0.5 - 0.1 = 0.4 -> [0.6, -0.4, -0.4, 0.6];
    # the group of one keeps its raw reward 0.5
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5])
    adv = asymre_advantages(rewards, ["a", "a", "a", "a", "b"])
    assert adv.tolist() == pytest.approx([0.6, -0.4, -0.4, 0.6, 0.5])
    adv = asymre_advantages(rewards, ["a", "a", "a", "a", "b"], baseline_shift=0.0)
    assert adv.tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5, 0.5])


def test_reinforce_is_the_raw_reward():
    adv = get_advantage_fn("reinforce").group(torch.tensor([1.0, 0.0, 0.3]), ["a", "a", "b"])
    assert adv[0].tolist() == pytest.approx([1.0, 0.0, 0.3]) and adv[1].all()


def test_rec_centres_and_optionally_normalises_with_biased_std():
    # [1, 0, 0, 1]: mean 0.5 -> ±0.5; biased std 0.5 -> ±0.5 / 0.500001 = ±0.999998
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    adv, keep = rec_advantages(rewards, ["a"] * 4)
    assert adv.tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5]) and keep.all()
    adv, _ = rec_advantages(rewards, ["a"] * 4, std_normalize=True)
    assert adv.tolist() == pytest.approx([0.999998, -0.999998, -0.999998, 0.999998], abs=1e-6)


def test_rec_balance_drops_the_extra_responses_below_the_mean():
    # [1, 0, 0, 0]: mean 0.25, three below and one at or above -> two of the zeros dropped
    # (keep False, advantage 0); the kept [1, 0] have mean 0.5 -> +0.5 and -0.5.
    # [1, 1, 1, 0]: one below, three above -> nothing dropped, mean 0.75.
    torch.manual_seed(0)
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    adv, keep = rec_advantages(rewards, ["a"] * 4 + ["b"] * 4, drop="balance")
    assert keep[:4].tolist().count(False) == 2 and bool(keep[0]) and keep[4:].all()
    kept_zero = [i for i in (1, 2, 3) if keep[i]]
    assert adv[0].item() == pytest.approx(0.5) and adv[kept_zero[0]].item() == pytest.approx(-0.5)
    assert [adv[i].item() for i in (1, 2, 3) if not keep[i]] == [0.0, 0.0]
    assert adv[4:].tolist() == pytest.approx([0.25, 0.25, 0.25, -0.75])
    with pytest.raises(ConfigError, match="drop"):
        rec_advantages(rewards, ["a"] * 8, drop="all")


def test_new_group_fns_run_in_the_explorer():
    for name in ("opmd", "asymre", "rec", "reinforce"):
        assert get_advantage_fn(name).level == "group"


@pytest.mark.parametrize("name", ["grpo", "rloo", "opmd", "rec"])
@pytest.mark.parametrize("reward", [0.1, 0.7, -0.3, 1.1])
def test_a_group_of_equal_rewards_gets_exactly_zero_advantages(name, reward):
    # in fp32, mean([0.1] * 8) is not 0.1 (the sum rounds): r - mean was ~7e-9, and grpo's
    # / (std + 1e-6) made it an advantage of ~0.007 for a group with nothing to learn
    rewards = torch.full((8,), reward, dtype=torch.float32)
    assert float(rewards.mean() - rewards[0]) != 0.0 or reward != 0.1  # fp32 misses for 0.1
    advantages, keep = get_advantage_fn(name).group(rewards, ["g"] * 8)
    assert advantages.dtype == torch.float32
    assert torch.equal(advantages, torch.zeros(8)) and bool(keep.all())
