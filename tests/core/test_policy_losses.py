"""Policy, value and entropy losses against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from rft_core.algorithms.entropy import entropy_from_logits
from rft_core.algorithms.policy_losses import dpo_loss, ppo_clip_loss, sft_loss, value_loss
from rft_core.errors import ConfigError

# Four trained tokens and one masked token (a huge ratio that must not count):
#   a: A=+1, ratio 1.5 -> -1.5 vs clipped -1.2 -> max -1.2         (clipped)
#   b: A=+1, ratio 0.5 -> -0.5 vs clipped -0.8 -> max -0.5         (not clipped)
#   c: A=-1, ratio 5.0 ->  5.0 vs clipped  1.2 -> 5.0, dual clip min(5, 3) = 3 (lower clip)
#   d: A=-1, ratio 1.1 ->  1.1 vs clipped  1.1 -> 1.1
# token-mean = (-1.2 - 0.5 + 3.0 + 1.1) / 4 = 0.6; clipfrac 1/4; clipfrac_lower 1/4
# ppo_kl = mean(-log ratio) = -(ln1.5 + ln0.5 + ln5 + ln1.1) / 4 = -1.4170660 / 4 = -0.3542665
RATIOS = [1.5, 0.5, 5.0, 1.1, math.exp(30)]
ADV = torch.tensor([[1.0, 1.0, -1.0, -1.0, 1.0]])
MASK = torch.tensor([[1, 1, 1, 1, 0]])
OLD = torch.full((1, 5), -2.0)


def _logprobs():
    return (OLD + torch.log(torch.tensor([RATIOS]))).requires_grad_(True)


def test_ppo_clip_with_dual_clip():
    lp = _logprobs()
    loss, m = ppo_clip_loss(lp, OLD, ADV, MASK)
    assert loss.item() == pytest.approx(0.6, abs=1e-5)
    assert m["pg_loss"] == pytest.approx(0.6, abs=1e-5)
    assert m["pg_clipfrac"] == pytest.approx(0.25)
    assert m["pg_clipfrac_lower"] == pytest.approx(0.25)
    assert m["ppo_kl"] == pytest.approx(-0.3542665, abs=1e-5)
    # Gradient: clipped tokens (a, c) and the masked one get 0; b: d(-A·ratio)/dlp = -0.5,
    # over 4 tokens -> -0.125; d: d(ratio)/dlp = 1.1 -> 0.275.
    loss.backward()
    assert lp.grad.tolist()[0] == pytest.approx([0.0, -0.125, 0.0, 0.275, 0.0], abs=1e-5)


def test_ppo_asymmetric_clip_and_clip_range_alias():
    # clip_range_high 0.28: token a clips at -1.28 -> (-1.28 - 0.5 + 3 + 1.1) / 4 = 0.58
    loss, _ = ppo_clip_loss(_logprobs(), OLD, ADV, MASK, clip_range_low=0.2, clip_range_high=0.28)
    assert loss.item() == pytest.approx(0.58, abs=1e-5)
    # clip_range 0.3 sets both sides: a -> -1.3; d stays 1.1 -> (-1.3 - 0.5 + 3 + 1.1) / 4 = 0.575
    loss, _ = ppo_clip_loss(_logprobs(), OLD, ADV, MASK, clip_range=0.3)
    assert loss.item() == pytest.approx(0.575, abs=1e-5)


def test_ppo_log_ratio_is_clamped_and_clip_ratio_c_checked():
    # log ratio 50 is clamped to 20, so ppo_kl = -20 and nothing is inf/nan
    lp = torch.tensor([[48.0]])
    loss, m = ppo_clip_loss(lp, torch.tensor([[-2.0]]), torch.tensor([[1.0]]), torch.ones(1, 1))
    assert m["ppo_kl"] == -20.0 and loss.item() == pytest.approx(-1.2)
    with pytest.raises(ConfigError, match="clip_ratio_c"):
        ppo_clip_loss(lp, lp, lp, torch.ones(1, 1), clip_ratio_c=1.0)


def test_sft_loss_is_negative_log_likelihood():
    lp = torch.tensor([[-1.0, -2.0], [-3.0, -4.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    # token-mean (1 + 2 + 3) / 3 = 2; seq-mean-token-sum (3 + 3) / 2 = 3
    loss, m = sft_loss(lp, mask)
    assert loss.item() == 2.0 and m == {"sft_loss": 2.0}
    assert sft_loss(lp, mask, "seq-mean-token-sum")[0].item() == 3.0


def test_dpo_loss():
    # chosen reward 0.1·(-10 + 11) = 0.1, rejected 0.1·(-12 + 11) = -0.1, z = 0.2
    # loss = -logσ(0.2) = ln(1 + e^-0.2) = ln 1.8187308 = 0.5981389
    one = torch.tensor
    loss, m = dpo_loss(one([-10.0]), one([-12.0]), one([-11.0]), one([-11.0]), beta=0.1)
    assert loss.item() == pytest.approx(0.5981389, abs=1e-6)
    assert m["dpo_accuracy"] == 1.0
    assert m["dpo_chosen_reward"] == pytest.approx(0.1)
    assert m["dpo_rejected_reward"] == pytest.approx(-0.1)
    # label smoothing 0.1: 0.9·0.5981389 + 0.1·(-logσ(-0.2) = 0.7981389) = 0.6181389
    loss, _ = dpo_loss(
        one([-10.0]), one([-12.0]), one([-11.0]), one([-11.0]), beta=0.1, label_smoothing=0.1
    )
    assert loss.item() == pytest.approx(0.6181389, abs=1e-6)
    # a second pair where the rejected answer gained more: z = -0.2, loss 0.7981389;
    # mean over pairs (0.5981389 + 0.7981389) / 2 = 0.6981389, accuracy 1/2
    loss, m = dpo_loss(
        one([-10.0, -12.0]), one([-12.0, -10.0]), one([-11.0, -11.0]), one([-11.0, -11.0])
    )
    assert loss.item() == pytest.approx(0.6981389, abs=1e-6)
    assert m["dpo_accuracy"] == 0.5


def test_value_loss_is_clipped_around_old_values():
    # token 0: v 1.0, old 0.5, clip 0.2 -> 0.7; (1-2)² = 1 vs (0.7-2)² = 1.69 -> 1.69 (clipped)
    # token 1: v 2.0 = old -> (2-0)² = 4 both
    # loss = 0.5 · (1.69 + 4) / 2 = 1.4225; clipfrac 1/2
    loss, m = value_loss(
        torch.tensor([[1.0, 2.0]]),
        torch.tensor([[0.5, 2.0]]),
        torch.tensor([[2.0, 0.0]]),
        torch.ones(1, 2),
        cliprange_value=0.2,
    )
    assert loss.item() == pytest.approx(1.4225)
    assert m == {"vf_loss": pytest.approx(1.4225), "vf_clipfrac": 0.5}


def test_entropy_from_logits():
    # uniform over 2: ln 2 = 0.6931472; probs (1/4, 3/4):
    # -(0.25·ln0.25 + 0.75·ln0.75) = 0.3465736 + 0.2157616 = 0.5623351
    logits = torch.tensor([[[0.0, 0.0], [0.0, math.log(3.0)]]])
    assert entropy_from_logits(logits).tolist()[0] == pytest.approx(
        [0.6931472, 0.5623351], abs=1e-6
    )
    # a -inf logit (token filtered out) contributes nothing and gives no NaN
    filtered = torch.tensor([[[0.0, 0.0, float("-inf")]]])
    assert entropy_from_logits(filtered).item() == pytest.approx(0.6931472, abs=1e-6)
