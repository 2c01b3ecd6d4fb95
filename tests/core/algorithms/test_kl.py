"""KL estimators against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from rft_core.algorithms.kl import (
    apply_kl_penalty,
    get_kl_fn,
    kl_k1,
    kl_k2,
    kl_k3,
    kl_loss,
    low_var_kl,
)
from rft_core.errors import ConfigError

# d = lp - ref = [0.5, -1.0, 0.0]
LP = torch.tensor([-1.0, -2.0, -0.5])
REF = torch.tensor([-1.5, -1.0, -0.5])


def test_k1_k2_k3():
    assert kl_k1(LP, REF).tolist() == pytest.approx([0.5, -1.0, 0.0])
    # k2 = d²/2
    assert kl_k2(LP, REF).tolist() == pytest.approx([0.125, 0.5, 0.0])
    # k3 with x = ref - lp = [-0.5, 1, 0]: e^x - 1 - x
    # e^-0.5 - 1 + 0.5 = 0.6065307 - 0.5 = 0.1065307; e - 2 = 0.7182818; 0
    assert kl_k3(LP, REF).tolist() == pytest.approx([0.1065307, 0.7182818, 0.0], abs=1e-6)


def test_low_var_kl_equals_k3_for_small_ratios_and_is_clamped_for_large():
    assert low_var_kl(LP, REF).tolist() == pytest.approx(kl_k3(LP, REF).tolist(), abs=1e-7)
    lp = torch.tensor([0.0, -30.0])
    ref = torch.tensor([-30.0, 0.0])
    # x = -30: k3 = e^-30 - 1 + 30 = 29; low_var_kl clamps x to -20 -> 19, then to 10
    # x = +30: k3 = e^30 - 31 (huge); low_var_kl clamps x to 20 -> e^20 - 21, then to 10
    assert kl_k3(lp, ref)[0].item() == pytest.approx(29.0)
    assert kl_k3(lp, ref)[1].item() == pytest.approx(math.exp(30) - 31, rel=1e-5)
    assert low_var_kl(lp, ref).tolist() == [10.0, 10.0]


def test_kl_loss_aggregates_under_mask():
    # k2 = [0.125, 0.5, 0], mask [1, 1, 0] -> token-mean (0.125 + 0.5) / 2 = 0.3125
    loss, metrics = kl_loss(LP[None], REF[None], torch.tensor([[1, 1, 0]]), "k2")
    assert loss.item() == pytest.approx(0.3125)
    assert metrics == {"kl_loss": pytest.approx(0.3125)}


def test_kl_penalty_is_subtracted_from_token_rewards():
    # k1 = [0.5, -1, 0], coef 0.1: rewards [0, 0, 1] -> [-0.05, 0.1, 1.0]; masked tokens untouched
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    out, metrics = apply_kl_penalty(rewards, LP[None], REF[None], torch.ones(1, 3), "k1", 0.1)
    assert out.tolist()[0] == pytest.approx([-0.05, 0.1, 1.0])
    assert metrics["kl_penalty"] == pytest.approx(-0.5 / 3)
    out, _ = apply_kl_penalty(rewards, LP[None], REF[None], torch.tensor([[0, 1, 1]]), "k1", 0.1)
    assert out.tolist()[0] == pytest.approx([0.0, 0.1, 1.0])


def test_get_kl_fn_names():
    assert get_kl_fn("K2") is kl_k2
    assert get_kl_fn(None)(LP, REF).tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ConfigError) as err:
        get_kl_fn("k4")
    assert err.value.path == "algorithm.kl_loss_fn"
    assert "low_var_kl" in str(err.value) and "'k4'" in str(err.value)
