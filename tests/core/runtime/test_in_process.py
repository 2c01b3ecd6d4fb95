"""An explorer and a trainer driven step by step in one process (``rft_core.runtime.in_process``): the
sync schedule, the hand-off straight from the trainer's parameters to the engine, the colocate
memory order, and a process where ``import ray`` fails (the GPU benchmark machine has no Ray)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from run_configs import run_config, run_taskset

from rft_core.config import load_config_from_dict
from rft_core.runtime.in_process import InProcessRun
from rft_core.sync.schedule import expected_model_versions

SCRIPT = Path(__file__).parents[1] / "in_process_script.py"
ROOT = Path(__file__).resolve().parents[3]


def _colocate(demo, root: Path, name: str, **synchronizer) -> dict:
    cfg = run_config(demo, root, name, synchronizer={"sync_method": "memory", **synchronizer})
    cfg["mode"] = "colocate"
    return cfg


@pytest.mark.slow
def test_a_run_without_ray_follows_the_sync_schedule_and_checkpoints(demo, tmp_path):
    # explorer |1|2|3|sync|4|5|  trainer |1|2|sync|3|4|sync|5|: offset 1, interval 2
    cfg = _colocate(demo, tmp_path, "no_ray", sync_interval=2, sync_offset=1)
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    out = tmp_path / "out.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "cfg.json"), str(out)],
        check=True,
        cwd=ROOT,
        env=env,
    )
    got = json.loads(out.read_text())
    assert got["ray"] == []  # nothing of Ray was imported (`import ray` raises there)
    explorer, trainer = got["summaries"]["explorer"], got["summaries"]["trainer"]
    assert [v for _, v in explorer["model_versions"]] == expected_model_versions(5, 2, 1)
    assert trainer["steps"] == 5 and trainer["saved_steps"] == [5]
    reports = got["reports"]
    assert [(r["explorer/step"], r["trainer/step"]) for r in reports] == [
        (1, 0),
        (2, 1),
        (3, 2),
        (4, 3),
        (5, 4),
    ]  # the trainer one step (sync_offset) behind; it trains step 5 at the end of data
    # the one hand-off before explorer step 4 (the weights the trainer published at step 2)
    assert ["time/sync_weight" in r for r in reports] == [False, False, False, True, False]
    job_dir = tmp_path / "orchestration" / "no_ray"
    assert (job_dir / "global_step_5" / "actor" / "model_world_size_1_rank_0.pt").is_file()
    explorer_log = (job_dir / "log" / "explorer.log").read_text()
    assert "explorer step 3: loaded weights version 2" in explorer_log
    # each role's monitor has its own steps, as with two actors
    trainer_steps = [
        json.loads(line)["step"]
        for line in (job_dir / "monitor" / "trainer_metrics.jsonl").read_text().splitlines()
    ]
    assert sorted(set(trainer_steps)) == [1, 2, 3, 4, 5]
    assert "rft_core.trainer" not in explorer_log  # the trainer's lines are in trainer.log only
    assert "saved checkpoint" in (job_dir / "log" / "trainer.log").read_text()


@pytest.mark.slow
def test_colocate_hands_the_trainers_parameters_to_the_engine_and_frees_memory_in_order(
    demo, tmp_path
):
    cfg = _colocate(demo, tmp_path, "hand_off", sync_interval=1, sync_offset=0)
    cfg["buffer"]["total_steps"] = 3
    cfg["buffer"]["explorer_input"]["eval_tasksets"] = [run_taskset(demo, "test", "held-out")]
    cfg["trainer"]["optimizer_offload"] = True
    run = InProcessRun(load_config_from_dict(cfg))
    run.start()
    # the engine's release_memory and the policy's offload/reload, recorded with the steps
    # they happen at
    events: list[tuple[str, int, int]] = []

    def record(name: str):
        return lambda: events.append((name, run.explorer.step, run.trainer.step))

    run.engine.release_memory = record("release_kv")
    run.trainer.policy.offload_optimizer = record("offload_optimizer")
    run.trainer.policy.reload_optimizer = record("reload_optimizer")
    reports = []
    while (report := run.step()) is not None:
        reports.append(report)
        # after the trainer's step and the hand-off's turn: the engine holds its parameters
        engine = run.engine.model.state_dict()
        trained = run.trainer.policy.model.state_dict()
        if run.explorer.step > 1:
            assert run.engine.model_version == run.explorer.step - 1
    run.finish()
    run.close()
    assert run.engine.model_version == 3  # the final weights, for the closing eval
    assert sorted(run.explorer.summary()["eval"]) == ["3"]
    for name, tensor in trained.items():
        assert torch.equal(engine[name], tensor), name  # copied, not converted through a file
    assert [r.get("time/sync_weight") is not None for r in reports] == [False, True, True]
    # per step: generate, free the KV cache, bring the optimizer back, train, offload it;
    # PolicyUpdater.train_step also reloads first (a no-op once the driver has: recorded twice)
    assert events == [
        ("release_kv", 1, 0),  # nothing offloaded yet: only train_step's own (no-op) reload
        ("reload_optimizer", 1, 0),
        ("offload_optimizer", 1, 1),
        ("release_kv", 2, 1),
        ("reload_optimizer", 2, 1),
        ("reload_optimizer", 2, 1),
        ("offload_optimizer", 2, 2),
        ("release_kv", 3, 2),
        ("reload_optimizer", 3, 2),
        ("reload_optimizer", 3, 2),
        ("offload_optimizer", 3, 3),
        ("reload_optimizer", 3, 3),  # finish: the final checkpoint saves the optimizer state
    ]
