"""Retention re-decides the best checkpoint as evals arrive (``rft_core.checkpoint.retention``,
called by the trainer at each save and by the explorer after each eval): a run whose best was an
older step at some point, and whose closing eval then finds the last step better, ends with the
last N checkpoints only. The run is real (the tiny demo model, in one process); the eval
metric's values are set per step by a reward registered here, so the best is known in advance."""

from __future__ import annotations

import pytest
from run_configs import run_config, run_taskset

from rft_core import rewards
from rft_core.checkpoint.layout import full_checkpoints
from rft_core.config import load_config_from_dict
from rft_core.runtime.in_process import InProcessRun

# the eval logged at explorer step S scores S's weights: 2 is the best until the closing eval
# at 4 beats it (0.95 > 0.9)
SCORES = {1: 0.2, 2: 0.9, 3: 0.3, 4: 0.95}
METRIC = "eval/held-out/step_score/mean@1"
_running: list[InProcessRun] = []


@rewards.register("test_step_score")
def _step_score(response: str, truth: str) -> dict[str, float]:
    return {"step_score": SCORES[_running[-1].explorer.step]}


@pytest.mark.slow
def test_a_run_ends_with_the_last_n_once_a_later_eval_beats_the_kept_best(demo, tmp_path):
    cfg = run_config(demo, tmp_path, "best", synchronizer={"sync_method": "memory"})
    cfg["mode"] = "colocate"
    cfg["buffer"]["total_steps"] = 4
    held_out = run_taskset(demo, "test", "held-out")
    held_out.update(default_reward_fn_type="test_step_score", rollout_args={"temperature": 0.0})
    cfg["buffer"]["explorer_input"]["eval_tasksets"] = [held_out]
    cfg["explorer"]["eval_interval"] = 1
    cfg["trainer"].update(save_interval=1, max_checkpoints_to_keep=1, best_checkpoint_metric=METRIC)
    run = InProcessRun(load_config_from_dict(cfg))
    _running.append(run)
    job_dir = tmp_path / "orchestration" / "best"
    on_disk: list[list[int]] = []
    try:
        run.start()
        while run.step() is not None:
            on_disk.append([s for s, _ in full_checkpoints(job_dir)])
        run.finish()
    finally:
        run.close()
        _running.clear()
    # step 2 (0.9) was kept as the best beside a newer checkpoint while the run went on
    assert any(steps == [2, 3] or steps == [2, 4] for steps in on_disk), on_disk
    # the closing eval at 4 (0.95) beat it: the last checkpoint alone is left (N = 1)
    assert [s for s, _ in full_checkpoints(job_dir)] == [4]
    explorer_log = (job_dir / "log" / "explorer.log").read_text()
    assert "pruned global_step_[2]: no longer the best" in explorer_log
