"""Real runs on Ray with the tiny demo model: ``examples/demo/countdown_demo.yaml`` (shortened)
and ``math_rm_workflow`` with the demo model as its judge in ``explorer.auxiliary_models``.
The untrained model writes junk, so these check that the runs finish with finite metrics under
the names users key on, not that anything is learnt."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from run_configs import demo_taskset

from rft_core.config import load_config_from_dict
from rft_core.runtime.launcher import run_experiment

ROOT = Path(__file__).resolve().parents[3]


def _finite(metrics: dict) -> bool:
    return all(math.isfinite(v) for v in metrics.values() if isinstance(v, float))


@pytest.mark.slow
def test_countdown_demo_config_runs_and_scores_with_countdown_reward(
    demo, local_ray, tmp_path, monkeypatch
):
    monkeypatch.setenv("RFT_DEMO_DIR", str(demo.root))
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path))
    d = yaml.safe_load((ROOT / "examples" / "demo" / "countdown_demo.yaml").read_text())
    d["buffer"].update(total_steps=2, batch_size=2)
    d["algorithm"]["repeat_times"] = 2
    d["model"]["max_response_tokens"] = 8
    d["explorer"]["eval_interval"] = 2
    result = run_experiment(load_config_from_dict(d)).last
    assert result.trainer["steps"] == 2
    job = Path(result.job_dir)
    metrics = [yaml.safe_load(line) for line in (job / "monitor" / "explorer_metrics.jsonl").open()]
    flat = {k: v for row in metrics for k, v in row.get("metrics", row).items()}
    assert {"rollout/score/mean", "rollout/reward/mean", "eval/countdown-eval/score/mean@1"} <= set(
        flat
    )
    assert 0.0 <= flat["rollout/score/mean"] <= 1.0
    assert all(_finite(row.get("metrics", row)) for row in metrics)
    samples = (job / "monitor" / "explorer_samples.jsonl").read_text()
    assert '"reward_parts": {"score":' in samples and "once each with + - * / to make" in samples


@pytest.mark.slow
def test_math_rm_workflow_judges_with_an_auxiliary_model_in_a_real_run(demo, local_ray, tmp_path):
    model = str(demo.model_dir)
    taskset = demo_taskset(
        demo,
        default_workflow_type="math_rm_workflow",
        workflow_args={
            "judge_prompt": "Q:{question} R:{response} Score:",
            "judge_system_prompt": "",
        },
    )
    cfg = load_config_from_dict(
        {
            "project": "judge",
            "name": "math_rm",
            "checkpoint_root_dir": str(tmp_path),
            "mode": "both",
            "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
            "model": {"model_path": model, "max_response_tokens": 6, "max_model_len": 96},
            "cluster": {"gpu_per_node": 0},
            "buffer": {
                "batch_size": 2,
                "total_steps": 2,
                "explorer_input": {"taskset": taskset},
                "trainer_input": {"experience_buffer": {"name": "exp", "storage_type": "queue"}},
            },
            "explorer": {
                "eval_on_startup": False,
                "eval_interval": 1000,
                "auxiliary_models": [
                    {
                        "model_path": model,
                        "engine_type": "hf",
                        "dtype": "float32",
                        "max_prompt_tokens": 120,
                        "max_response_tokens": 4,
                    }
                ],
            },
            "synchronizer": {"sync_method": "nccl", "sync_interval": 1},
            "trainer": {"save_interval": 0, "save_hf_checkpoint": "never"},
        }
    )
    result = run_experiment(cfg).last
    assert result.trainer["steps"] == 2
    job = Path(result.job_dir)
    log = (job / "log" / "explorer.log").read_text()
    assert f"auxiliary models: {model}" in log
    rows = [yaml.safe_load(line) for line in (job / "monitor" / "explorer_metrics.jsonl").open()]
    flat = {k: v for row in rows for k, v in row.get("metrics", row).items()}
    # the junk judge gives no parsable score: judge_score 0 for every response, finite
    assert flat["rollout/judge_score/mean"] == 0.0 and _finite(flat)
