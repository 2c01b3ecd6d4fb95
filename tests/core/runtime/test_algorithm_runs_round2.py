"""Short real runs of the round-2 algorithms (sapo, m2po, raft, grpo_verl with Clip_B,
multi_step_grpo, gigpo) on the tiny demo model: explorer and trainer in one process
(``InProcessRun``, the code path of ``mode: colocate``), two steps each, with the preset's own
advantage fn and policy loss. Every step reports finite metrics, including each algorithm's own
(M2PO's m2 statistics, SAPO's gate, Clip_B's filter, RAFT's SFT loss).

The single-turn ones score a response by its length in characters (``algorithm_runs``, as
test_algorithm_runs.py: the untrained model never earns the math reward, so its groups would
have nothing to compare).
The step-wise ones play the demo's frozen lake, one experience per turn."""

from __future__ import annotations

import math

import pytest
import yaml
from algorithm_runs import colocated_run_config
from run_configs import FROZEN_LAKE_DEMO_CONFIG, run_steps

from rft_core.config import load_config_from_dict

# algorithm_type -> (advantage fn, policy loss, metrics of its own the trainer reports)
SINGLE_TURN = {
    "sapo": ("grpo", "sapo", ["actor/sapo_loss", "actor/avg_soft_gate"]),
    "m2po": ("grpo", "m2po", ["actor/m2_before", "actor/m2_after", "actor/masked_fraction"]),
    "raft": ("raft", "sft", ["actor/sft_loss"]),
    "grpo_verl": ("clipb", "ppo", ["actor/clipb/frac_clipped", "actor/clipb/varS"]),
}
STEP_WISE = {"multi_step_grpo": "step_wise_grpo", "gigpo": "gigpo"}


@pytest.mark.parametrize("algorithm_type", SINGLE_TURN)
def test_a_short_single_turn_run_reports_its_own_metrics(demo, tmp_path, algorithm_type):
    algorithm = {"algorithm_type": algorithm_type, "repeat_times": 2}
    if algorithm_type == "raft":
        # the demo model's 6-token answers are 5 or 6 characters here (rewards 5/32, 6/32):
        # the 6-character ones pass
        algorithm["advantage_fn_args"] = {"reward_threshold": 0.17}
    if algorithm_type == "grpo_verl":
        algorithm["advantage_fn"] = "clipb"  # Trinity's Clip_B example: grpo_verl + clipb
        algorithm["advantage_fn_args"] = {"mu": 0.5}
    config = load_config_from_dict(colocated_run_config(demo, tmp_path, algorithm))
    a = config.algorithm
    assert (a.advantage_fn, a.policy_loss_fn) == SINGLE_TURN[algorithm_type][:2]
    reports, summaries = run_steps(config)
    assert summaries["trainer"]["steps"] == 2
    trained = [r for r in reports if "actor/grad_norm" in r]
    assert len(trained) == 2, [sorted(r) for r in reports]
    for r in trained:
        for name in ["actor/grad_norm", "critic/rewards/mean", *SINGLE_TURN[algorithm_type][2]]:
            assert math.isfinite(r[name]), (name, r[name])
    assert any(r["actor/grad_norm"] > 0 for r in trained), trained
    if algorithm_type == "raft":  # the filter: rollouts under 0.17 are not trained on
        for r in reports:
            count = r["experience_pipeline/experience_count"]
            assert (count == 4) == (r["rollout/reward/min"] >= 0.17), r
            assert (count == 0) == (r["rollout/reward/max"] < 0.17), r


@pytest.mark.parametrize("algorithm_type", STEP_WISE)
def test_a_short_step_wise_frozen_lake_run(demo, tmp_path, monkeypatch, algorithm_type):
    monkeypatch.setenv("RFT_DEMO_DIR", str(demo.root))
    cfg = yaml.safe_load(FROZEN_LAKE_DEMO_CONFIG.read_text())
    cfg.pop("stages")  # no warmup: the untrained model plays two steps
    cfg["checkpoint_root_dir"] = str(tmp_path / "ckpt")
    cfg["mode"] = "colocate"
    cfg["synchronizer"] = {"sync_method": "memory", "sync_interval": 1}
    cfg["algorithm"] = {"algorithm_type": algorithm_type, "repeat_times": 2}
    cfg["model"]["model_path"] = str(demo.model_dir)
    cfg["buffer"]["batch_size"] = 2
    cfg["buffer"]["total_steps"] = 2
    for key in ("max_prompt_tokens", "max_model_len"):  # 2 turns of the short observations
        cfg["model"][key] = 240 if key == "max_prompt_tokens" else 256
    cfg["buffer"]["explorer_input"]["taskset"]["workflow_args"]["max_steps"] = 2
    cfg["buffer"]["explorer_input"]["taskset"]["path"] = str(demo.frozen_lake_dir)
    cfg["buffer"]["explorer_input"].pop("eval_tasksets")
    cfg["explorer"]["eval_on_startup"] = False
    cfg["trainer"]["save_hf_checkpoint"] = "never"
    config = load_config_from_dict(cfg)
    assert config.algorithm.advantage_fn == STEP_WISE[algorithm_type]
    reports, summaries = run_steps(config)
    assert summaries["trainer"]["steps"] >= 1
    explored = [r for r in reports if "rollout/env_steps/mean" in r]
    assert len(explored) == 2
    for r in explored:
        # rollout metrics are per episode (4 of them), the experiences one per turn (1-2 each)
        turns = r["rollout/env_steps/mean"]
        assert 1.0 <= turns <= 2.0
        assert r["experience_pipeline/experience_count"] == pytest.approx(4 * turns)
    trained = [r for r in reports if "actor/pg_loss" in r]
    assert trained
    for r in trained:
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float)), r
