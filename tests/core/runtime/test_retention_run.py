"""Checkpoint retention in a real run: the demo config (``examples/demo/grpo_demo.yaml``:
SFT warmup then GRPO, CPU, the tiny demo model) shortened, saving every 2 trainer steps with the
demo's retention (``max_checkpoints_to_keep: 1`` and the best by held-out accuracy), ends with
the newest checkpoint of each stage plus each stage's best on disk (the SFT warmup's trainer
evaluates too), and a job dir that is those checkpoints and a few MiB more."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rft_core.checkpoint.layout import dir_size, full_checkpoints, latest_checkpoint_step
from rft_core.config import load_config_from_dict
from rft_core.runtime.launcher import run_experiment

ROOT = Path(__file__).resolve().parents[3]
METRIC = "eval/arithmetic-eval/accuracy/mean@1"


def _expected_best(stage_dir: Path, saved: set[int], role: str = "explorer") -> int | None:
    """The saved step with the highest eval accuracy, the earlier one on a tie (worked out
    here from the role's metrics file, independently of the pruning code)."""
    best = None
    for line in (stage_dir / "monitor" / f"{role}_metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if METRIC in row and row["step"] in saved:
            key = (-row[METRIC], row["step"])
            best = key if best is None or key < best else best
    return None if best is None else best[1]


def _evals(stage_dir: Path) -> list[tuple[int, float]]:
    rows = map(
        json.loads, (stage_dir / "monitor" / "explorer_metrics.jsonl").read_text().splitlines()
    )
    return [(row["step"], row[METRIC]) for row in rows if METRIC in row]


@pytest.mark.slow
def test_a_demo_run_ends_with_the_retained_checkpoints_only(demo, local_ray, tmp_path, monkeypatch):
    monkeypatch.setenv("RFT_DEMO_DIR", str(demo.root))
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path))
    d = yaml.safe_load((ROOT / "examples" / "demo" / "grpo_demo.yaml").read_text())
    assert d["trainer"]["max_checkpoints_to_keep"] == 1  # the demo's own retention
    assert d["trainer"]["best_checkpoint_metric"] == METRIC
    d["trainer"]["save_interval"] = 2
    d["stages"][0]["buffer"]["total_steps"] = 6
    d["stages"][0]["buffer"]["train_batch_size"] = 8
    d["buffer"].update(total_steps=6, batch_size=2)
    d["algorithm"]["repeat_times"] = 2
    d["model"]["max_response_tokens"] = 8
    d["explorer"]["eval_interval"] = 2
    results = run_experiment(load_config_from_dict(d))
    job = Path(results.last.job_dir).parent
    sft, rft = job / "sft_warmup", job / "rft"

    # SFT: saved at 2, 4, 6; its trainer evaluates on the held-out set before each save
    # (rft_core.trainer.held_out_eval): the newest and the best by that eval
    sft_best = _expected_best(sft, {2, 4, 6}, role="trainer")
    assert sft_best is not None
    assert [s for s, _ in full_checkpoints(sft)] == sorted({6, sft_best})
    # RFT: saved at 2, 4, 6; the newest and the best by held-out accuracy
    best = _expected_best(rft, {2, 4, 6})
    # a best that is the newest would pass whether or not the best is kept: this run's short
    # warmup leaves held-out accuracy at 0.0 at every eval, so the tie goes to step 2
    assert best is not None and best != 6, _evals(rft)
    assert [s for s, _ in full_checkpoints(rft)] == sorted({6, best})
    assert latest_checkpoint_step(rft) == 6 and latest_checkpoint_step(sft) == 6
    # the trainer's log names what it pruned
    log = (rft / "log" / "trainer.log").read_text()
    assert "pruned global_step_" in log
    # and each step's line (what the run page's log shows between checkpoints and evals)
    assert "trainer step 6: " in log and "actor/pg_loss=" in log
    assert "explorer step 6: rollout/reward/mean=" in (rft / "log" / "explorer.log").read_text()
    total = dir_size(job)
    sizes = {
        f"{stage.name}/global_step_{s}": dir_size(p)
        for stage in (sft, rft)
        for s, p in full_checkpoints(stage)
    }
    print(f"job dir {total / 2**20:.1f} MiB; checkpoints (MiB):",
          {k: round(v / 2**20, 1) for k, v in sizes.items()})  # fmt: skip
    # the kept checkpoints are the job dir: each ~36 MiB (model, AdamW state, the last one's HF
    # weights), and the logs, metrics and buffers beside them a few MiB
    assert all(size < 50 * 2**20 for size in sizes.values()), sizes
    assert total - sum(sizes.values()) < 10 * 2**20, (total, sizes)
