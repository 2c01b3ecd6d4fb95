"""mix and mix_chord policy losses (RL on rollouts + SFT on expert rows) against hand-computed
values, and CHORD's mu schedule."""

from __future__ import annotations

import math

import pytest
import torch

from rft_core.algorithms.policy_losses import chord_mu, mix_chord_policy_loss, mix_policy_loss

# Row 0 is a rollout: log-probs equal the old ones (ratio 1, nothing clipped), A = [+1, -0.5]
#   PPO token-mean = (-1·1 + 0.5·1) / 2 = -0.25
# Row 1 is an expert response with token probabilities 0.5 and 0.25:
#   NLL mean = (ln 2 + ln 4) / 2 = (0.693147 + 1.386294) / 2 = 1.039721
#   phi = p(1-p) = 0.25, 0.1875 -> (0.25·ln 2 + 0.1875·ln 4) / 2 = (0.173287 + 0.259930) / 2
#       = 0.216609
OLD = torch.tensor([[-1.0, -2.0], [0.0, 0.0]])  # an expert row's old log-probs are zeros
ADV = torch.tensor([[1.0, -0.5], [0.0, 0.0]])
MASK = torch.ones(2, 2)
EXPERT = torch.tensor([False, True])


def _logprobs() -> torch.Tensor:
    return torch.tensor([[-1.0, -2.0], [math.log(0.5), math.log(0.25)]]).requires_grad_(True)


def test_mix_weights_ppo_by_one_minus_mu_and_sft_by_mu():
    # mu 0.25: 0.75·(-0.25) + 0.25·1.039721 = -0.1875 + 0.259930 = 0.072430
    loss, m = mix_policy_loss(_logprobs(), OLD, ADV, MASK, EXPERT, mu=0.25)
    assert loss.item() == pytest.approx(0.072430, abs=1e-5)
    assert m["usual/pg_loss"] == pytest.approx(-0.25, abs=1e-6)
    assert m["expert/sft_loss"] == pytest.approx(1.039721, abs=1e-5)
    assert m["mu"] == 0.25


def test_mix_chord_weights_expert_tokens_by_phi_and_scheduled_mu():
    # warmup 4 to peak 0.5: step 2 -> mu 0.25; 0.75·(-0.25) + 0.25·0.216609 = -0.133348
    lp = _logprobs()
    args = dict(mu_warmup_steps=4, mu_decay_steps=4, mu_peak=0.5, mu_valley=0.1)
    loss, m = mix_chord_policy_loss(lp, OLD, ADV, MASK, EXPERT, step=2, **args)
    assert m["mu"] == pytest.approx(0.25)
    assert m["expert/sft_phi_loss"] == pytest.approx(0.216609, abs=1e-5)
    assert loss.item() == pytest.approx(-0.133348, abs=1e-5)
    # phi is a detached weight: d/dlp of mu·(-phi·lp)/2 = -0.25·phi/2 = -0.03125, -0.0234375;
    # the rollout row: (1-mu)·(-A·ratio)/2 -> -0.375, +0.1875
    loss.backward()
    assert lp.grad.tolist() == [
        pytest.approx([-0.375, 0.1875], abs=1e-6),
        pytest.approx([-0.03125, -0.0234375], abs=1e-6),
    ]


def test_chord_mu_warms_up_decays_by_cosine_then_stays_at_valley():
    # peak 0.5, valley 0.1, warmup 4, decay 4: step 6 is half-way: 0.1 + 0.4·0.5·(1 + cos π/2) = 0.3
    mus = [chord_mu(s, 4, 4, 0.5, 0.1) for s in (0, 2, 4, 6, 8, 100)]
    assert mus == pytest.approx([0.0, 0.25, 0.5, 0.3, 0.1, 0.1])
    # Trinity's defaults (no warmup, no decay): the valley from the start
    assert chord_mu(0, 0, 0, 0.1, 0.1) == 0.1


def test_micro_batches_with_step_totals_add_up_to_one_pass():
    # three rows: rollout (2 tokens), expert (2 tokens), rollout (1 token); the micro-batches
    # [0, 1] and [2] given the step's totals (rollouts 3 tokens / 2 rows, expert 2 / 1) must sum
    # to the loss of one pass over all three rows
    lp = torch.tensor([[-1.0, -2.0], [math.log(0.5), math.log(0.25)], [-0.7, -0.3]])
    old = torch.tensor([[-1.1, -1.9], [0.0, 0.0], [-0.5, 0.0]])
    adv = torch.tensor([[1.0, 1.0], [0.0, 0.0], [-2.0, -2.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    expert = torch.tensor([False, True, False])
    for fn in (mix_policy_loss, mix_chord_policy_loss):
        whole, _ = fn(lp, old, adv, mask, expert)
        totals = dict(usual_totals=(3.0, 2), expert_totals=(2.0, 1))
        first, _ = fn(lp[:2], old[:2], adv[:2], mask[:2], expert[:2], **totals)
        second, _ = fn(lp[2:], old[2:], adv[2:], mask[2:], expert[2:], **totals)
        assert (first + second).item() == pytest.approx(whole.item(), abs=1e-6)


def test_a_batch_without_expert_rows_is_scaled_ppo():
    loss, m = mix_policy_loss(_logprobs()[:1], OLD[:1], ADV[:1], MASK[:1], EXPERT[:1], mu=0.1)
    assert loss.item() == pytest.approx(0.9 * -0.25)
    assert "expert/sft_loss" not in m
