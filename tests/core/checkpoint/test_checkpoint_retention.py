"""Checkpoint retention (``rft_core.checkpoint.retention``): the newest N full checkpoints of a
stage, the best by an eval metric, the resume step and pinned steps stay; the rest go.

The trees are written by hand (the marker files the layout reads), so no torch is needed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from run_configs import minimal_config

from rft_core.checkpoint.layout import FULL_CHECKPOINT_MARKER, LATEST_CHECKPOINTED
from rft_core.checkpoint.retention import (
    best_checkpoint_step,
    pinned_step,
    pins_of,
    prune_checkpoints,
)
from rft_core.config import load_config_from_dict


def _tree(job_dir, steps, *, latest=None, sync_only=()):
    for step in steps:
        d = job_dir / f"global_step_{step}" / "actor"
        d.mkdir(parents=True)
        (d / "model_world_size_1_rank_0.pt").write_bytes(b"x" * 100)
        (d.parent / FULL_CHECKPOINT_MARKER).touch()
    for step in sync_only:
        (job_dir / f"global_step_{step}" / "actor").mkdir(parents=True)
    if latest is not None:
        (job_dir / LATEST_CHECKPOINTED).write_text(f"{latest}\n")


def _left(job_dir):
    return sorted(int(p.name.rsplit("_", 1)[1]) for p in job_dir.glob("global_step_*"))


def _eval(job_dir, values):
    monitor = job_dir / "monitor"
    monitor.mkdir(exist_ok=True)
    with (monitor / "explorer_metrics.jsonl").open("a") as f:
        for step, value in values.items():
            f.write(json.dumps({"step": step, "time": 1.0, "eval/held/accuracy/mean@1": value}))
            f.write("\n")
        f.write('{"step": 99, "eval/held/accuracy')  # a line being written is skipped


def test_it_keeps_the_newest_n_and_the_sync_dirs(tmp_path):
    _tree(tmp_path, [10, 20, 30, 40, 50], latest=50, sync_only=[51])
    assert prune_checkpoints(tmp_path, 0) == [] and prune_checkpoints(tmp_path, None) == []
    assert prune_checkpoints(tmp_path, 2) == [10, 20, 30]
    assert _left(tmp_path) == [40, 50, 51]


def test_it_keeps_the_best_step_by_the_eval_metric(tmp_path):
    _tree(tmp_path, [10, 20, 30, 40, 50], latest=50)
    # the eval at step 20 is the best (0.9); step 35 has no checkpoint, its 0.95 does not count
    _eval(tmp_path, {0: 0.1, 10: 0.5, 20: 0.9, 30: 0.7, 35: 0.95, 40: 0.6, 50: 0.8})
    assert best_checkpoint_step(tmp_path, "eval/held/accuracy/mean@1") == 20
    assert best_checkpoint_step(tmp_path, "eval/held/accuracy/mean@1", "min") == 10
    removed = prune_checkpoints(tmp_path, 1, best_metric="eval/held/accuracy/mean@1")
    assert removed == [10, 30, 40]
    assert _left(tmp_path) == [20, 50]


def test_it_never_deletes_the_resume_step_or_a_pinned_step(tmp_path):
    # latest_checkpointed_iteration names 20: a resume of this job dir loads it
    _tree(tmp_path, [10, 20, 30, 40], latest=20)
    with pinned_step(tmp_path / "global_step_10", "convert") as pinned:
        assert pins_of(pinned) == [p.name for p in (pinned / ".pins").iterdir()]
        assert prune_checkpoints(tmp_path, 1) == [30]
    assert _left(tmp_path) == [10, 20, 40]
    assert pins_of(tmp_path / "global_step_10") == []  # unpinned on exit
    assert prune_checkpoints(tmp_path, 1) == [10]


def test_a_pin_of_a_dead_process_does_not_count(tmp_path):
    _tree(tmp_path, [10, 20], latest=20)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    import socket

    pins = tmp_path / "global_step_10" / ".pins"
    pins.mkdir()
    (pins / "convert-dead").write_text(
        json.dumps({"pid": int(dead.stdout), "host": socket.gethostname()})
    )
    assert pins_of(tmp_path / "global_step_10") == []
    assert prune_checkpoints(tmp_path, 1) == [10]


MINIMAL = minimal_config()


@pytest.mark.parametrize(
    "trainer",
    [
        {"max_checkpoints_to_keep": 3},
        # verl's spellings inside trainer_config (Trinity-RFT's configs carry them)
        {"trainer_config": {"trainer": {"max_actor_ckpt_to_keep": 3}}},
        {"trainer_config": {"trainer": {"max_ckpt_to_keep": 3}}},
    ],
)
def test_the_setting_is_read_in_trinity_and_verl_spellings(trainer):
    cfg = load_config_from_dict({**MINIMAL, "trainer": trainer})
    assert cfg.trainer.max_checkpoints_to_keep == 3


def test_a_best_mode_other_than_max_or_min_is_refused_with_its_path():
    from rft_core.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        load_config_from_dict({**MINIMAL, "trainer": {"best_checkpoint_mode": "highest"}})
    assert "trainer.best_checkpoint_mode" in str(err.value)
