"""A fork of a real demo run from its step-k checkpoint (``rft_core.checkpoint.fork``): a new
job dir that starts at step k + 1 with the checkpoint's weights and optimizer state, and the
seeding's refusals."""

import json
from pathlib import Path

import pytest
import torch
from run_configs import logged_steps, run_config

from rft_core.checkpoint.fork import FORK_META, seed_job_dir
from rft_core.checkpoint.layout import step_dir
from rft_core.checkpoint.store import load_checkpoint
from rft_core.config import load_config_from_dict
from rft_core.errors import CheckpointError
from rft_core.runtime.launcher import run_experiment


@pytest.mark.slow
def test_a_fork_from_step_2_starts_at_step_3_with_the_checkpoints_weights(
    demo,
    local_ray,
    tmp_path,
):
    parent_cfg = run_config(
        demo,
        tmp_path / "parent",
        "parent",
        synchronizer={"sync_method": "checkpoint"},
        trainer={"save_interval": 1, "save_hf_checkpoint": "never"},
    )
    parent_cfg["buffer"]["total_steps"] = 3
    parent = Path(run_experiment(load_config_from_dict(parent_cfg)).last.job_dir)
    ckpt2, ckpt3 = load_checkpoint(parent, 2), load_checkpoint(parent, 3)

    # the fork: new job dir, new hyperparameters. lr 1e-30: an Adam update of about lr per
    # weight (and decay by a factor 1 - lr * wd) is below float32's resolution at these
    # weights' size (~1e-2 * 6e-8), so the fork's weights must stay the checkpoint's exactly
    fork_cfg = run_config(
        demo,
        tmp_path / "fork",
        "fork",
        synchronizer={"sync_method": "checkpoint"},
        trainer={"save_interval": 1, "save_hf_checkpoint": "never"},
        algorithm={"optimizer": {"lr": 1e-30}},
    )
    fork_cfg["buffer"]["total_steps"] = 4
    fork = Path(load_config_from_dict(fork_cfg).job_dir)
    seeded = seed_job_dir(fork, [step_dir(parent, 2)], forked_from={"job_dir": str(parent)})
    assert seeded == [2]
    assert json.loads((fork / FORK_META).read_text())["job_dir"] == str(parent)
    # hard links: the fork costs no disk for the seeded checkpoint
    rank0 = next((step_dir(fork, 2) / "actor").glob("model_world_size_*_rank_0.pt"))
    parent_rank0 = step_dir(parent, 2) / "actor" / rank0.name
    assert rank0.stat().st_ino == parent_rank0.stat().st_ino

    result = run_experiment(load_config_from_dict(fork_cfg)).last
    assert result.job_dir == str(fork)
    # the step counter continues: steps 3 and 4, the explorer's first with the step-2 weights
    assert logged_steps(fork, "trainer") == [3, 4]
    assert [tuple(sv) for sv in result.explorer["model_versions"]] == [(3, 2), (4, 3)]
    fork3 = load_checkpoint(fork, 3)
    assert fork3.extra_state["global_step"] == 3
    # the optimizer state came with the weights: Adam's counter went on from 2 (fresh: 1)
    assert max(s["step"] for s in fork3.optimizer_state["state"].values()) == 3
    # weights: lr 1e-30 kept the step-2 tensors exactly, which differ from the parent's step 3
    name = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(fork3.state_dict[name], ckpt2.state_dict[name])
    assert not torch.equal(ckpt3.state_dict[name], ckpt2.state_dict[name])
    # the parent's tree is untouched by the fork's run
    assert sorted(p.name for p in parent.glob("global_step_*")) == [
        "global_step_1",
        "global_step_2",
        "global_step_3",
    ]
    assert torch.equal(load_checkpoint(parent, 3).state_dict[name], ckpt3.state_dict[name])


def test_seeding_refuses_a_weight_sync_dir_and_an_occupied_job_dir(tmp_path):
    sync_only = tmp_path / "parent" / "global_step_4"
    (sync_only / "actor").mkdir(parents=True)
    with pytest.raises(CheckpointError, match="global_step_4 is not a full checkpoint"):
        seed_job_dir(tmp_path / "fork", [sync_only])
    assert not (tmp_path / "fork").exists()  # nothing half-written
    (sync_only / ".full_checkpoint").touch()
    seed_job_dir(tmp_path / "fork", [sync_only])
    assert (tmp_path / "fork" / "latest_checkpointed_iteration.txt").read_text() == "4\n"
    with pytest.raises(CheckpointError, match="already holds checkpoints"):
        seed_job_dir(tmp_path / "fork", [sync_only])
