"""frozen_lake_workflow for real: the tiny demo model plays the demo's lakes in a short
``trinity run`` (explorer and trainer actors, HF engine, CPU), and every metric is finite; the
experiences the trainer got hold the lake's turns masked."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import yaml
from run_configs import FROZEN_LAKE_DEMO_CONFIG, trinity_run

from rft_core.demo import build_tokenizer

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_lakes_and_warmup_episodes(demo):
    train = [json.loads(line) for line in (demo.frozen_lake_dir / "train.jsonl").open()]
    test = [json.loads(line) for line in (demo.frozen_lake_dir / "test.jsonl").open()]
    assert {r["seed"] for r in train}.isdisjoint(r["seed"] for r in test)
    assert train[0].keys() == {"prompt", "size", "p", "seed"}
    row = json.loads(demo.frozen_lake_sft_path.open().readline())
    roles = [m["role"] for m in row["messages"]]
    assert roles[:3] == ["system", "user", "assistant"] and roles[-1] == "assistant"
    assert all(m["content"].startswith("```") for m in row["messages"] if m["role"] == "assistant")


def test_a_short_frozen_lake_run_on_the_demo_model(demo, tmp_path):
    cfg = yaml.safe_load(FROZEN_LAKE_DEMO_CONFIG.read_text())
    cfg.pop("stages")  # no warmup: the untrained model plays (and mostly fails) two steps
    cfg["checkpoint_root_dir"] = str(tmp_path / "ckpt")
    cfg["algorithm"]["repeat_times"] = 2
    cfg["buffer"]["batch_size"] = 2
    cfg["buffer"]["total_steps"] = 2
    cfg["buffer"]["explorer_input"].pop("eval_tasksets")
    cfg["buffer"]["trainer_input"]["experience_buffer"]["path"] = str(tmp_path / "exp.jsonl")
    cfg["explorer"]["eval_on_startup"] = False
    cfg["trainer"]["save_hf_checkpoint"] = "never"
    config = tmp_path / "lake.yaml"
    config.write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRINITY_", "RAY_ADDRESS"))}
    env.update(RFT_DEMO_DIR=str(demo.root), PYTHONPATH=str(ROOT))
    proc = trinity_run(
        config,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    monitor = tmp_path / "ckpt" / "demo" / "frozen_lake_demo" / "monitor"
    explorer = _metrics(monitor / "explorer_metrics.jsonl")
    trainer = _metrics(monitor / "trainer_metrics.jsonl")
    rollout = [m for m in explorer if "rollout/success/mean" in m]
    assert len(rollout) == 2
    for metrics in rollout:
        assert 0.0 <= metrics["rollout/success/mean"] <= 1.0
        assert 1.0 <= metrics["rollout/env_steps/mean"] <= 4.0
    steps = [m for m in trainer if "actor/pg_loss" in m]
    assert len(steps) == 2
    for metrics in steps:
        assert all(math.isfinite(v) for v in metrics.values() if isinstance(v, float))
    # the experiences: 4 turns at most, the lake's tokens masked, the model's with log-probs
    tok = build_tokenizer()
    rows = [json.loads(line) for line in (tmp_path / "exp.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 2 * 2
    for row in rows:
        ids, mask = row["response_ids"], row["action_mask"]
        assert len(ids) == len(mask) == len(row["logprobs"])
        masked = tok.decode([t for t, m in zip(ids, mask, strict=True) if not m])
        assert masked.count("steps left.") == row["info"]["turns"] - 1
        assert all(lp <= 0 for lp, m in zip(row["logprobs"], mask, strict=True) if m)


def _metrics(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            out.append(row.get("metrics", row))
    return out
