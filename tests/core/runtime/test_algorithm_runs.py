"""Short real runs of each Trinity-RFT algorithm family added beside grpo (opmd, gspo, cispo,
topr, sppo, asymre, rec) on the tiny demo model: explorer and trainer in one process
(``InProcessRun``, the code path of ``mode: colocate``), two steps each, with the preset's
own advantage fn and policy loss. Every step reports finite loss and reward metrics, and the
policy gets a gradient.

The untrained demo model never earns the math reward in 6 tokens, so these runs score a response
by its length in characters instead (``algorithm_runs.colocated_run_config``)."""

from __future__ import annotations

import math

import pytest
from algorithm_runs import colocated_run_config
from run_configs import run_steps

from rft_core.config import load_config_from_dict

# algorithm_type -> (advantage fn, policy loss) its preset picks
FAMILIES = {
    "opmd": ("opmd", "opmd"),
    "gspo": ("grpo", "gspo"),
    "cispo": ("grpo", "cispo"),
    "topr": ("reinforce", "topr"),
    "sppo": ("opmd", "sppo"),
    "asymre": ("asymre", "opmd"),
    "rec": ("rec", "rec"),
}
# the loss each family's policy loss reports besides pg_loss (Trinity's metric names)
OWN_LOSS = {"opmd": "opmd_loss", "asymre": "opmd_loss", "cispo": "cispo_loss", "topr": "topr_loss"}


@pytest.mark.parametrize("algorithm_type", FAMILIES)
def test_a_short_run_reports_finite_loss_and_rewards(demo, tmp_path, algorithm_type):
    cfg = colocated_run_config(
        demo,
        tmp_path,
        # a Trinity-only advantage argument (grpo's duplicate_experiences): warned when the
        # config loads, never handed to the advantage fn
        {
            "algorithm_type": algorithm_type,
            "repeat_times": 2,
            "advantage_fn_args": {"duplicate_experiences": True},
        },
    )
    config = load_config_from_dict(cfg)
    a = config.algorithm
    assert (a.advantage_fn, a.policy_loss_fn) == FAMILIES[algorithm_type]
    reports, summaries = run_steps(config)
    assert summaries["trainer"]["steps"] == 2
    trained = [r for r in reports if "actor/pg_loss" in r]
    assert len(trained) == 2, [sorted(r) for r in reports]
    for r in trained:
        names = [
            "actor/pg_loss",
            "actor/grad_norm",
            "critic/rewards/mean",
            "critic/advantages/mean",
        ]
        names += [f"actor/{OWN_LOSS[algorithm_type]}"] if algorithm_type in OWN_LOSS else []
        for name in names:
            assert math.isfinite(r[name]), (name, r[name])
    assert any(r["actor/grad_norm"] > 0 for r in trained), trained
    for r in reports:
        assert math.isfinite(r["rollout/response_chars/mean"])
