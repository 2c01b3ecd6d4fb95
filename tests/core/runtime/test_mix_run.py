"""A real mix_chord run on the tiny demo model, explorer and trainer in one process: each
trainer step trains on the explorer's rollouts and on expert rows of the demo's SFT file, with
CHORD's mu schedule, and reports finite losses and rewards."""

import json
import math

import pytest
from run_configs import run_config

from rft_core.config import load_config_from_dict
from rft_core.runtime.in_process import InProcessRun


@pytest.mark.slow
def test_mix_chord_trains_on_rollouts_and_expert_rows_with_finite_metrics(demo, tmp_path):
    cfg = run_config(
        demo,
        tmp_path,
        "mix_chord",
        algorithm={
            "algorithm_type": "mix_chord",
            "repeat_times": 2,
            "optimizer": {"lr": 1e-4},
            # 6 a step: ceil(0.3 x 6) = 2 expert rows + 4 rollouts (2 tasks x 2)
            "sample_strategy_args": {"expert_data_ratio": 0.3},
            # mu 0 -> 0.5 over 2 steps, then cosine down to 0.1 over 2: steps 0..3 (steps done)
            # -> 0, 0.25, 0.5, 0.3
            "policy_loss_fn_args": {
                "mu_warmup_steps": 2,
                "mu_decay_steps": 2,
                "mu_peak": 0.5,
                "mu_valley": 0.1,
            },
        },
        model={"model_path": str(demo.model_dir), "max_response_tokens": 6, "max_model_len": 160},
        synchronizer={"sync_method": "memory"},
    )
    cfg["mode"] = "colocate"
    cfg["buffer"].update(train_batch_size=6, total_steps=4)
    cfg["buffer"]["trainer_input"]["auxiliary_buffers"] = {
        "sft_dataset": {"name": "expert", "storage_type": "file", "path": str(demo.sft_path)}
    }
    run = InProcessRun(load_config_from_dict(cfg))
    run.start()
    while run.step() is not None:
        pass
    summary = run.finish()
    run.close()
    assert summary["trainer"]["steps"] == 4
    job_dir = tmp_path / "orchestration" / "mix_chord"
    steps = [
        json.loads(line)
        for line in (job_dir / "monitor" / "trainer_metrics.jsonl").read_text().splitlines()
    ]
    metrics: dict[int, dict] = {}
    for row in steps:
        metrics.setdefault(row["step"], {}).update(row)
    assert sorted(metrics) == [1, 2, 3, 4]
    assert [metrics[s]["actor/mu"] for s in (1, 2, 3, 4)] == pytest.approx([0.0, 0.25, 0.5, 0.3])
    for s, m in metrics.items():
        for name in (
            "actor/usual/pg_loss",
            "actor/expert/sft_phi_loss",
            "actor/mix_loss",
            "actor/grad_norm",
            "critic/rewards/mean",
        ):
            assert math.isfinite(m[name]), (s, name, m.get(name))
        assert m["actor/expert/sft_phi_loss"] > 0  # expert rows were in every step
    explorer = [
        json.loads(line)
        for line in (job_dir / "monitor" / "explorer_metrics.jsonl").read_text().splitlines()
    ]
    rewards = [r["rollout/accuracy/mean"] for r in explorer if "rollout/accuracy/mean" in r]
    assert len(rewards) == 4 and all(math.isfinite(r) for r in rewards)
