"""Hand-worked values of SAPO's soft-gated loss and M2PO's second-moment mask and loss
(rft_core/algorithms/soft_losses.py), their gradients and their metrics."""

from __future__ import annotations

import math

import pytest
import torch

from rft_core.algorithms.policy_losses import POLICY_LOSSES
from rft_core.algorithms.soft_losses import m2po_loss, m2po_token_mask, sapo_loss
from rft_core.errors import ConfigError


def test_both_are_registered_as_advantage_losses():
    assert POLICY_LOSSES.get("sapo").inputs == "advantages"
    assert POLICY_LOSSES.get("m2po").inputs == "advantages"


def test_sapo_gates_each_token_by_its_ratio_and_advantage_sign():
    # one row, two tokens: old log-probs 0; new log-probs 0 and log 1.5: ratios 1 and 1.5
    # token 0: A = +1, tau_pos 1: gate = sigmoid(0) · 4 / 1 = 2; loss -1 · 2 · 0 = 0
    # token 1: A = -1, tau_neg 1.05: gate = sigmoid(1.05 · 0.5) · 4 / 1.05
    #          sigmoid(0.525) = 1 / (1 + e^-0.525) = 1 / 1.591555 = 0.628316
    #          gate = 0.628316 · 3.809524 = 2.393585; loss = 1 · 2.393585 · log 1.5 = 0.970515
    # token-mean: (0 + 0.970515) / 2 = 0.485258
    lp = torch.tensor([[0.0, math.log(1.5)]], requires_grad=True)
    old = torch.zeros(1, 2)
    adv = torch.tensor([[1.0, -1.0]])
    loss, m = sapo_loss(lp, old, adv, torch.ones(1, 2))
    gate1 = (1 / (1 + math.exp(-0.525))) * 4 / 1.05
    assert gate1 == pytest.approx(2.393585, abs=1e-6)
    assert float(loss.detach()) == pytest.approx(0.485258, abs=1e-6)
    assert m["sapo_loss"] == m["pg_loss"] == pytest.approx(0.485258, abs=1e-6)
    assert m["avg_soft_gate"] == pytest.approx((2 + 2.393585) / 2, abs=1e-6)
    assert m["avg_ratio"] == pytest.approx(1.25)
    assert m["pos_adv_frac"] == pytest.approx(0.5)
    assert m["ppo_kl"] == pytest.approx(-math.log(1.5) / 2)
    # the gate is a detached weight: d loss / d lp = -A · gate / 2 tokens: [-1, +1.196793]
    loss.backward()
    assert lp.grad.tolist()[0] == pytest.approx([-1.0, 2.393585 / 2], abs=1e-6)


def test_sapo_refuses_tau_neg_below_tau_pos():
    lp = torch.zeros(1, 1)
    with pytest.raises(ConfigError, match="tau_neg"):
        sapo_loss(lp, lp, lp, torch.ones(1, 1), tau_pos=1.0, tau_neg=0.9)


# log ratios, advantages: the trust region (A > 0 and log r > 0, or A < 0 and log r < 0) is
# tokens 0 (0.3), 1 (0.1) and 2 (-0.2); tokens 3 and 4 (A < 0, log r > 0) are outside
LOG_RATIO = torch.tensor([[0.3, 0.1, -0.2, 0.05, 0.4]])
ADV = torch.tensor([[1.0, 1.0, -1.0, -1.0, -1.0]])


def test_m2po_masks_the_largest_second_moments_until_the_mean_is_under_the_threshold():
    # squares in the trust region: [0.09, 0.01, 0.04], mean 0.14 / 3 = 0.046667 > 0.04
    # sorted 0.01, 0.04, 0.09; running means 0.01, 0.025, 0.046667: the first two stay (<= 0.04)
    # so token 0 (0.09) is masked; m2 after = 0.025
    keep, stats = m2po_token_mask(LOG_RATIO, ADV, torch.ones(1, 5), 0.04)
    assert keep.tolist() == [[False, True, True, True, True]]
    assert stats["m2_before"] == pytest.approx(0.14 / 3)
    assert stats["m2_after"] == pytest.approx(0.025)
    assert stats["masked_fraction"] == pytest.approx(1 / 5)
    assert stats["trust_region_fraction"] == pytest.approx(3 / 5)
    # threshold 0.05 >= 0.046667: nothing masked
    keep, stats = m2po_token_mask(LOG_RATIO, ADV, torch.ones(1, 5), 0.05)
    assert keep.all() and stats["masked_fraction"] == 0.0
    with pytest.raises(ConfigError, match="m2_threshold"):
        m2po_token_mask(LOG_RATIO, ADV, torch.ones(1, 5), -1.0)


def test_m2po_loss_divides_the_unmasked_tokens_by_every_trained_token():
    # kept tokens 1..4: -A · r = -e^0.1 + e^-0.2 + e^0.05 + e^0.4
    #   = -1.1051709 + 0.8187308 + 1.0512711 + 1.4918247 = 2.2566557; / 5 tokens = 0.4513311
    lp = LOG_RATIO.clone().requires_grad_(True)
    loss, m = m2po_loss(lp, torch.zeros(1, 5), ADV, torch.ones(1, 5))
    assert float(loss.detach()) == pytest.approx(0.4513311, abs=1e-6)
    assert m["pg_loss"] == pytest.approx(0.4513311, abs=1e-6)
    # computed here (no step mask given): its statistics come back as metrics
    assert m["m2_before"] == pytest.approx(0.14 / 3) and m["masked_fraction"] == pytest.approx(0.2)
    # gradient -A · r / 5 on kept tokens, 0 on the masked one
    loss.backward()
    expected = [0.0, -math.exp(0.1) / 5, math.exp(-0.2) / 5, math.exp(0.05) / 5, math.exp(0.4) / 5]
    assert lp.grad.tolist()[0] == pytest.approx(expected, abs=1e-6)
    # a step mask given by the trainer is used as it is: keep only token 4 -> e^0.4 / 5
    step_mask = torch.tensor([[False, False, False, False, True]])
    loss, m = m2po_loss(LOG_RATIO, torch.zeros(1, 5), ADV, torch.ones(1, 5), m2po_mask=step_mask)
    assert float(loss) == pytest.approx(math.exp(0.4) / 5, abs=1e-6)
    assert "m2_before" not in m  # the trainer logs the step's statistics


def test_m2po_clamps_the_log_ratio_in_value_and_needs_token_mean():
    # log r = 30 clamped to 20 in value: loss -1 · e^20; a token-mean of one token
    lp = torch.tensor([[30.0]])
    loss, _ = m2po_loss(lp, torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), m2_threshold=1e9)
    assert float(loss) == pytest.approx(-math.exp(20.0), rel=1e-5)
    with pytest.raises(ConfigError, match="token-mean"):
        m2po_loss(lp, lp, lp, torch.ones(1, 1), loss_agg_mode="seq-mean-token-mean")
