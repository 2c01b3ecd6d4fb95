"""Policy, value and entropy losses against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from rft_core.algorithms.entropy import entropy_from_logits
from rft_core.algorithms.policy_losses import (
    cispo_loss,
    dpo_loss,
    gspo_loss,
    opmd_loss,
    ppo_clip_loss,
    rec_loss,
    sft_loss,
    sppo_loss,
    topr_loss,
    value_loss,
)
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


# ---- Trinity-RFT's other losses, on the four tokens above (OLD = -2, lp = -2 + ln ratio):
# lp_a = -1.5945349, lp_b = -2.6931472, lp_c = -0.3905621, lp_d = -1.9046898
LP = [-1.5945349, -2.6931472, -0.3905621, -1.9046898]


def test_opmd_is_the_plain_surrogate_over_one_plus_tau():
    # -A·lp: 1.5945349 + 2.6931472 - 0.3905621 - 1.9046898 = 1.9924302; / 4 = 0.4981076;
    # / (1 + tau = 2) = 0.2490538. Old log-probs play no part. Gradient -A / (4·2) = ∓0.125.
    lp = _logprobs()
    loss, m = opmd_loss(lp, OLD, ADV, MASK)
    assert loss.item() == pytest.approx(0.2490538, abs=1e-6)
    assert m["opmd_loss"] == m["pg_loss"] == pytest.approx(0.2490538, abs=1e-6)
    loss.backward()
    assert lp.grad.tolist()[0] == pytest.approx([-0.125, -0.125, 0.125, 0.125, 0.0])
    same, _ = opmd_loss(lp, OLD + 7.0, ADV, MASK)
    assert same.item() == pytest.approx(loss.item())
    half, _ = opmd_loss(lp, OLD, ADV, MASK, tau=0.0)
    assert half.item() == pytest.approx(0.4981076, abs=1e-6)


# GSPO: row 0 log-ratios [0.2, -0.1], A = +1 -> s0 = exp(mean 0.05) = 1.0512711;
#       row 1 log-ratios [0, 0, (50, masked)], A = -1 -> s1 = exp(0) = 1.
GSPO_OLD = torch.full((2, 3), -1.0)
GSPO_LOG_RATIO = torch.tensor([[0.2, -0.1, 0.0], [0.0, 0.0, 50.0]])
GSPO_MASK = torch.tensor([[1, 1, 0], [1, 1, 0]])
GSPO_ADV = torch.tensor([[1.0, 1.0, 0.0], [-1.0, -1.0, -1.0]])


def _gspo_logprobs():
    return (GSPO_OLD + GSPO_LOG_RATIO).requires_grad_(True)


def test_gspo_clips_the_sequence_ratio_with_trinity_default_ranges():
    # default clip 3e-4 / 4e-4: row 0: max(-1.0512711, -clip(s0) = -1.0004) = -1.0004 (clipped,
    # both tokens); row 1: max(1, 1) = 1. seq-mean-token-mean: (-1.0004 + 1) / 2 = -0.0002.
    # ppo_kl = -(0.2 - 0.1 + 0 + 0) / 4 = -0.025; ppo_kl_seq = -(0.05 + 0) / 2 = -0.025.
    # Gradient: row 0 clipped -> 0; row 1: d(-A·ratio_t)/dlp_t = 1, / 2 tokens / 2 rows = 0.25.
    lp = _gspo_logprobs()
    loss, m = gspo_loss(lp, GSPO_OLD, GSPO_ADV, GSPO_MASK)
    assert loss.item() == pytest.approx(-0.0002, abs=1e-6)
    assert m["pg_clipfrac"] == pytest.approx(0.5)
    assert m["ppo_kl"] == pytest.approx(-0.025) and m["ppo_kl_seq"] == pytest.approx(-0.025)
    loss.backward()
    assert lp.grad.flatten().tolist() == pytest.approx([0.0, 0.0, 0.0, 0.25, 0.25, 0.0], abs=1e-6)


def test_gspo_ratio_is_one_value_per_sequence():
    # clip_range 0.2 sets both sides: s0 = 1.0512711 is inside [0.8, 1.2] ->
    # (-1.0512711 + 1) / 2 = -0.0256355. Each token of row 0 carries the same ratio s0 (PPO
    # would give e^0.2 and e^-0.1): gradient -A·s0 / (2·2) = -0.2628178 on both.
    lp = _gspo_logprobs()
    loss, m = gspo_loss(lp, GSPO_OLD, GSPO_ADV, GSPO_MASK, clip_range=0.2)
    assert loss.item() == pytest.approx(-0.0256355, abs=1e-6)
    assert m["pg_clipfrac"] == 0.0
    loss.backward()
    assert lp.grad[0].tolist() == pytest.approx([-0.2628178, -0.2628178, 0.0], abs=1e-6)


def test_cispo_clips_the_weight_and_keeps_the_gradient():
    # defaults low 1.0 (no lower bound), high 0.28; w = sg(clip(ratio, 0, 1.28))·m:
    #   a: A>0, ratio 1.5 > 1.28 -> m = 0: 0
    #   b: w 0.5:  -1·0.5·(-2.6931472) =  1.3465736
    #   c: w 1.28 (A<0 keeps its token): 1.28·(-0.3905621) = -0.4999195
    #   d: w 1.1:  1.1·(-1.9046898) = -2.0951588
    # token-mean (0 + 1.3465736 - 0.4999195 - 2.0951588) / 4 = -0.3121262; kept 3 of 4.
    # Gradient -A·w / 4: [0, -0.125, 0.32, 0.275, 0].
    lp = _logprobs()
    loss, m = cispo_loss(lp, OLD, ADV, MASK)
    assert loss.item() == pytest.approx(-0.3121262, abs=1e-6)
    assert m["cispo_loss"] == pytest.approx(-0.3121262, abs=1e-6)
    assert m["masked_frac"] == pytest.approx(0.75)
    loss.backward()
    assert lp.grad.tolist()[0] == pytest.approx([0.0, -0.125, 0.32, 0.275, 0.0], abs=1e-6)


def test_topr_tapers_only_negative_samples():
    # old -2; p: A=+1, ratio 0.5 -> α = 1 (positive: never tapered), lp = -2.6931472
    #         n1: A=-1, ratio 0.5 -> α = 0.5, lp = -2.6931472
    #         n2: A=-1, ratio 2   -> α = clip(2, 0, 1) = 1, lp = -1.3068528
    # -α·A·lp: 2.6931472 - 1.3465736 - 1.3068528 = 0.0397208; / 3 = 0.0132403
    # avg_alpha (1 + 0.5 + 1) / 3 = 0.8333333; gradient -α·A / 3 = [-1/3, 1/6, 1/3]
    old = torch.full((1, 3), -2.0)
    lp = (old + torch.log(torch.tensor([[0.5, 0.5, 2.0]]))).requires_grad_(True)
    adv = torch.tensor([[1.0, -1.0, -1.0]])
    loss, m = topr_loss(lp, old, adv, torch.ones(1, 3))
    assert loss.item() == pytest.approx(0.0132403, abs=1e-6)
    assert m["avg_alpha"] == pytest.approx(0.8333333, abs=1e-6)
    loss.backward()
    assert lp.grad.tolist()[0] == pytest.approx([-1 / 3, 1 / 6, 1 / 3], abs=1e-6)


def test_sppo_trains_only_tokens_inside_its_ratio_band():
    # epsilon 0.3: band [1/1.3 = 0.7692308, 1.3]; a (1.5), b (0.5), c (5) are outside.
    # d: -A·ln 1.1 = 0.0953102; / 4 = 0.0238275; clipfrac 3/4; gradient only d: -A / 4 = 0.25
    lp = _logprobs()
    loss, m = sppo_loss(lp, OLD, ADV, MASK)
    assert loss.item() == pytest.approx(0.0238275, abs=1e-6)
    assert m["pg_clipfrac"] == pytest.approx(0.75)
    loss.backward()
    assert lp.grad.tolist()[0] == pytest.approx([0.0, 0.0, 0.0, 0.25, 0.0])


@pytest.mark.parametrize(
    ("args", "expected", "clipfrac"),
    [
        # none: -A·lp over all four = 1.9924302 / 4
        ({}, 0.4981076, 0.0),
        # two-side [0.8, 1.2]: only d: -1.9046898 / 4
        ({"clip_mode": "two-side"}, -0.4761725, 0.75),
        # one-side: a (A>0, 1.5 > 1.2) out; b, c (A<0, 5 >= 0.8), d in:
        #   (2.6931472 - 0.3905621 - 1.9046898) / 4 = 0.3978953 / 4
        ({"clip_mode": "one-side"}, 0.0994738, 0.25),
        # ring (lo' 0.6, hi' 2): band keeps d; A<0 with ratio >= 3 keeps c; b (0.5 > 0.4) out:
        #   (-0.3905621 - 1.9046898) / 4
        ({"clip_mode": "ring"}, -0.5738130, 0.5),
        # importance_sampling, no clip: -A·ratio·lp:
        #   2.3918024 + 1.3465736 - 1.9528105 - 2.0951588 = -0.3095933; / 4
        ({"weight": "importance_sampling"}, -0.0773983, 0.0),
        # k2 regularizer 0.5·(log ratio)²: 0.5·(0.1644020 + 0.4804530 + 2.5902903 + 0.0090840)/4
        #   = 0.4055287, added to 0.4981076
        ({"regularizer": "k2", "regularizer_coef": 0.5}, 0.9036363, 0.0),
    ],
)
def test_rec_variants(args, expected, clipfrac):
    loss, m = rec_loss(_logprobs(), OLD, ADV, MASK, **args)
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert m["pg_clipfrac"] == pytest.approx(clipfrac)


def test_rec_rejects_an_unknown_variant_naming_the_key():
    with pytest.raises(ConfigError, match="clip_mode: must be one of none, one-side"):
        rec_loss(_logprobs(), OLD, ADV, MASK, clip_mode="both-sides")
