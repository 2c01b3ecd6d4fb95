"""Trinity's asynchronous pair: a ``mode: train`` job and a ``mode: explore`` job that share one
job dir and one experience buffer (``examples/async_gsm8k`` in Trinity-RFT,
``examples/demo/async_*.yaml`` here).

The end-to-end test runs both as real ``python -m rft_core.cli run`` processes, each with its
own local Ray, on the tiny demo model on CPU; nothing is mocked. The other tests cover the
pieces (weight watch, buffer between jobs, config and preflight errors) without Ray.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from run_configs import run_taskset

from rft_core.buffer import BufferTimeout, build_buffer
from rft_core.buffer.file import FileBuffer
from rft_core.buffer.sql import SQLBuffer
from rft_core.checkpoint.layout import FULL_CHECKPOINT_MARKER, LATEST_STATE_DICT, step_dir
from rft_core.checkpoint.store import save_state_dict_for_sync
from rft_core.config import load_config, load_config_from_dict
from rft_core.errors import ConfigError
from rft_core.experience import Experience
from rft_core.runtime.preflight import preflight
from rft_core.sync.checkpoint_watch import CheckpointWatch

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_EXPLORER = ROOT / "examples" / "demo" / "async_explorer.yaml"
EXAMPLE_TRAINER = ROOT / "examples" / "demo" / "async_trainer.yaml"
BUFFER_PATH = "buffer.trainer_input.experience_buffer.path"


def _weights(value: float) -> dict[str, torch.Tensor]:
    return {"w": torch.full((3, 2), value), "b": torch.full((2,), -value)}


# -- the explorer's weight watch ---------------------------------------------------------------


def test_watch_returns_at_once_when_nothing_newer_is_published(tmp_path):
    watch = CheckpointWatch(tmp_path)
    assert watch.newer(0) is None  # empty job dir: no weights, no waiting
    save_state_dict_for_sync(tmp_path, 2, _weights(2.0))
    version, state_dict = watch.newer(0)
    assert version == 2
    assert torch.equal(state_dict["w"], torch.full((3, 2), 2.0))
    assert torch.equal(state_dict["b"], torch.full((2,), -2.0))
    assert watch.newer(2) is None  # already has it
    assert watch.newer(5) is None  # ahead of the trainer (a resumed explorer)


def test_watch_follows_latest_state_dict_and_survives_pruned_dirs(tmp_path):
    watch = CheckpointWatch(tmp_path)
    for step in (1, 2, 3):
        save_state_dict_for_sync(tmp_path, step, _weights(float(step)))
    # the trainer keeps the newest two sync-only dirs
    assert not step_dir(tmp_path, 1).exists()
    version, state_dict = watch.newer(1)
    assert version == 3 and float(state_dict["w"][0, 0]) == 3.0
    # latest_state_dict_iteration.txt names a dir the trainer already replaced or pruned
    (tmp_path / LATEST_STATE_DICT).write_text("7\n")
    version, _ = watch.newer(0)
    assert version == 3  # the newest global_step_N that is there


def test_watch_gives_up_on_unreadable_weights_without_raising(tmp_path):
    actor = step_dir(tmp_path, 4) / "actor"
    actor.mkdir(parents=True)
    (actor / "model_world_size_1_rank_0.pt").write_bytes(b"half written")
    (tmp_path / LATEST_STATE_DICT).write_text("4\n")
    assert CheckpointWatch(tmp_path).newer(0) is None


# -- the experience buffer between two jobs ----------------------------------------------------


def _experiences(n: int, version: int) -> list[Experience]:
    return [
        Experience(prompt_ids=[1, i], response_ids=[i], reward=float(i), model_version=version)
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("path", "kind", "on_disk"),
    [("sqlite:///shared.db", SQLBuffer, "shared.db"), ("shared.jsonl", FileBuffer, "shared.jsonl")],
)
def test_a_queue_between_jobs_is_its_path_mirror(tmp_path, path, kind, on_disk):
    # two jobs, two build_buffer calls on the same job dir: what one writes the other reads
    writer = build_buffer(
        "queue", name="exp", path=path, job_dir=tmp_path, role="writer", between_jobs=True
    )
    reader = build_buffer(
        "queue", name="exp", path=path, job_dir=tmp_path, role="reader", between_jobs=True
    )
    assert isinstance(writer, kind) and isinstance(reader, kind)
    assert (tmp_path / "buffer" / on_disk).exists()
    writer.put(_experiences(3, version=2))
    got = reader.get(2, timeout=5)
    assert [e.reward for e in got] == [0.0, 1.0] and {e.model_version for e in got} == {2}
    # the writer has not finished: the reader waits for more instead of ending early
    with pytest.raises(BufferTimeout):
        reader.get(2, timeout=0.3)
    writer.close()  # explorer finished: the reader drains the rest, then sees the end
    assert [e.reward for e in reader.get(2, timeout=5)] == [2.0]
    assert reader.get(2, timeout=5) == []


def test_a_queue_without_path_cannot_reach_another_job(tmp_path):
    with pytest.raises(ConfigError) as err:
        build_buffer("queue", name="exp", path=None, job_dir=tmp_path, between_jobs=True)
    assert err.value.path == BUFFER_PATH
    assert "sqlite:///" in str(err.value)


# -- the YAML pair -----------------------------------------------------------------------------


def test_example_pair_loads_with_one_job_dir_and_one_buffer(monkeypatch, demo):
    monkeypatch.setenv("RFT_DEMO_DIR", str(demo.root))
    monkeypatch.delenv("TRINITY_CHECKPOINT_ROOT_DIR", raising=False)
    explorer, trainer = load_config(EXAMPLE_EXPLORER), load_config(EXAMPLE_TRAINER)
    assert (explorer.mode, trainer.mode) == ("explore", "train")
    assert explorer.job_dir == trainer.job_dir
    eb_e = explorer.buffer.trainer_input.experience_buffer
    eb_t = trainer.buffer.trainer_input.experience_buffer
    assert (eb_e.name, eb_e.storage_type, eb_e.path) == (eb_t.name, eb_t.storage_type, eb_t.path)
    assert explorer.synchronizer.sync_method == trainer.synchronizer.sync_method == "checkpoint"
    assert explorer.synchronizer.sync_interval == trainer.synchronizer.sync_interval
    # one explorer step of experiences is one trainer step
    per_step = explorer.buffer.batch_size * explorer.algorithm.repeat_times
    assert trainer.buffer.train_batch_size == per_step
    preflight(explorer)
    preflight(trainer)


def test_train_mode_queue_without_path_names_the_path(demo):
    cfg = _trainer_config(demo, Path("/tmp/unused"))
    del cfg["buffer"]["trainer_input"]["experience_buffer"]["path"]
    cfg["buffer"]["trainer_input"]["experience_buffer"]["storage_type"] = "queue"
    with pytest.raises(ConfigError) as err:
        load_config_from_dict(cfg)
    assert err.value.path == BUFFER_PATH


def test_train_mode_without_buffer_says_what_the_explore_job_writes(demo):
    cfg = _trainer_config(demo, Path("/tmp/unused"))
    del cfg["buffer"]["trainer_input"]
    with pytest.raises(ConfigError) as err:
        load_config_from_dict(cfg)
    assert err.value.path == "buffer.trainer_input.experience_buffer"
    assert "explore job" in str(err.value)


def test_explore_mode_queue_without_path_fails_before_ray(demo):
    cfg = _explorer_config(demo, Path("/tmp/unused"))
    cfg["buffer"]["trainer_input"]["experience_buffer"] = {"name": "exp", "storage_type": "queue"}
    with pytest.raises(ConfigError) as err:
        preflight(load_config_from_dict(cfg))
    assert err.value.path == BUFFER_PATH


# -- the trainer of a train job, in process -----------------------------------------------------


def _step_experiences(step: int, count: int) -> list[Experience]:
    return [
        Experience(
            prompt_ids=[5, 6, 7, 8 + i],
            response_ids=[9, 10 + i, 11],
            logprobs=[-1.0, -1.0, -1.0],
            reward=float(i % 2),
            advantage=1.0 if i % 2 else -1.0,
            group_id=f"{step}/0",
            explorer_step=step,
        )
        for i in range(count)
    ]


def test_a_resumed_train_job_skips_the_experiences_its_checkpoint_trained_on(demo, tmp_path):
    from rft_core.trainer.trainer import Trainer, read_trainer_meta

    per_step = BATCH * REPEAT

    def run_trainer(total_steps: int, resume_step: int | None) -> dict:
        cfg = _trainer_config(demo, tmp_path)
        cfg["trainer"].update(save_interval=1, total_steps=total_steps)
        trainer = Trainer(load_config_from_dict(cfg))
        try:
            return trainer.run(resume_step=resume_step)
        finally:
            trainer.close()

    job_dir = tmp_path / "async" / "pair"
    writer = build_buffer("sql", name="pair_buffer", path="sqlite:///pair.db", job_dir=job_dir)
    for step in (1, 2, 3):
        writer.put(_step_experiences(step, per_step))
    assert run_trainer(2, None)["steps"] == 2
    assert read_trainer_meta(job_dir)["experience_buffer"]["consumed"] == 2 * per_step
    # the rerun continues at step 3 with the third explorer step's experiences, not the first
    assert run_trainer(3, 2)["steps"] == 3
    assert read_trainer_meta(job_dir)["experience_buffer"] == {
        "consumed": 3 * per_step,
        "last_id": 3 * per_step,
    }
    # and it published its weights for the explore job at every step (sync_interval 1)
    assert (job_dir / LATEST_STATE_DICT).read_text().strip() == "3"


# -- both jobs, real processes -----------------------------------------------------------------

EXPLORER_STEPS = 10
BATCH, REPEAT = 2, 2


def _common(demo, root: Path, mode: str) -> dict:
    return {
        "project": "async",
        "name": "pair",
        "checkpoint_root_dir": str(root),
        "mode": mode,
        "algorithm": {"algorithm_type": "grpo", "repeat_times": REPEAT, "optimizer": {"lr": 1e-4}},
        "model": {
            "model_path": str(demo.model_dir),
            "max_response_tokens": 16,
            "max_model_len": 128,
        },
        "cluster": {"gpu_per_node": 0},
        "buffer": {
            "explorer_input": {"taskset": run_taskset(demo, "train", "arithmetic")},
            "trainer_input": {
                "experience_buffer": {
                    "name": "pair_buffer",
                    "storage_type": "sql",
                    "path": "sqlite:///pair.db",
                    "max_read_timeout": 300,
                }
            },
        },
        "synchronizer": {"sync_method": "checkpoint", "sync_interval": 1},
    }


def _explorer_config(demo, root: Path) -> dict:
    cfg = _common(demo, root, "explore")
    cfg["buffer"].update(batch_size=BATCH, total_steps=EXPLORER_STEPS)
    return cfg


def _trainer_config(demo, root: Path) -> dict:
    cfg = _common(demo, root, "train")
    cfg["buffer"]["train_batch_size"] = BATCH * REPEAT
    cfg["trainer"] = {"save_interval": 0, "save_hf_checkpoint": "never"}
    return cfg


def _start(config: dict, path: Path, cwd: Path) -> subprocess.Popen:
    path.write_text(json.dumps(config))  # JSON is YAML
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRINITY_", "RAY_ADDRESS"))}
    return subprocess.Popen(
        [sys.executable, "-m", "rft_core.cli", "run", "--config", str(path)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_line(proc: subprocess.Popen, log: Path, text: str) -> None:
    """Wait until ``text`` is in ``log`` (the job is ready), failing if the job exits first."""
    while not (log.exists() and text in log.read_text()):
        if proc.poll() is not None:
            pytest.fail(f"trainer exited with {proc.returncode}: {proc.stderr.read()[-2000:]}")
        time.sleep(0.2)


def _finish(proc: subprocess.Popen, role: str) -> str:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, f"{role} job exited {proc.returncode}: {err[-3000:]}"
    return out


@pytest.mark.slow
def test_train_job_and_explore_job_cooperate_through_the_job_dir(demo, tmp_path):
    job_dir = tmp_path / "async" / "pair"
    # trainer first, as Trinity advises; the explorer starts once the trainer waits for data
    trainer = _start(_trainer_config(demo, tmp_path), tmp_path / "trainer.yaml", tmp_path)
    try:
        _wait_for_line(trainer, job_dir / "log" / "trainer.log", "trainer reading experiences")
        explorer = _start(_explorer_config(demo, tmp_path), tmp_path / "explorer.yaml", tmp_path)
        explorer_out = _finish(explorer, "explore")
        trainer_out = _finish(trainer, "train")
    finally:
        for proc in (trainer, locals().get("explorer")):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert f"{EXPLORER_STEPS} explorer steps" in explorer_out
    per_step = BATCH * REPEAT

    # the trainer consumed every experience the explorer wrote, one explorer step per trainer
    # step, and stopped when the explorer had finished and the buffer was drained
    assert f"{EXPLORER_STEPS} trainer steps" in trainer_out
    with sqlite3.connect(job_dir / "buffer" / "pair.db") as db:
        rows = db.execute("SELECT data FROM pair_buffer ORDER BY id").fetchall()
    written = [json.loads(data) for (data,) in rows]
    assert len(written) == EXPLORER_STEPS * per_step
    trainer_meta = json.loads((job_dir / "trainer_meta.json").read_text())
    assert trainer_meta["latest_iteration"] == EXPLORER_STEPS
    assert trainer_meta["experience_buffer"]["consumed"] == len(written)
    trained = [
        json.loads(line)["step"]
        for line in (job_dir / "monitor" / "trainer_metrics.jsonl").read_text().splitlines()
    ]
    assert trained == list(range(1, EXPLORER_STEPS + 1))

    # the trainer published weights at every sync step (sync_interval 1) in the checkpoint tree
    trainer_log = (job_dir / "log" / "trainer.log").read_text()
    published = {int(v) for v in re.findall(r"published weights version (\d+)", trainer_log)}
    assert published == set(range(1, EXPLORER_STEPS + 1))
    assert (job_dir / LATEST_STATE_DICT).read_text().strip() == str(EXPLORER_STEPS)
    assert (step_dir(job_dir, EXPLORER_STEPS) / FULL_CHECKPOINT_MARKER).exists()

    # the explorer recorded a model version per step; it rose above 0 by loading what the
    # trainer published, never a version the trainer did not write
    metrics = [
        json.loads(line)
        for line in (job_dir / "monitor" / "explorer_metrics.jsonl").read_text().splitlines()
    ]
    versions = {
        m["step"]: int(m["explorer/model_version"])
        for m in metrics
        if "explorer/model_version" in m
    }
    assert sorted(versions) == list(range(1, EXPLORER_STEPS + 1))
    used = [versions[s] for s in sorted(versions)]
    assert used == sorted(used) and used[0] == 0 and used[-1] > 0
    assert set(used) - {0} <= published
    explorer_log = (job_dir / "log" / "explorer.log").read_text()
    loaded = {int(v) for v in re.findall(r"loaded weights version (\d+)", explorer_log)}
    assert set(used) - {0} <= loaded
    # each experience carries the version of the step that made it
    assert all(e["model_version"] == versions[e["explorer_step"]] for e in written)
    meta = json.loads((job_dir / "explorer_meta.json").read_text())
    assert meta["latest_iteration"] == EXPLORER_STEPS and meta["model_version"] == used[-1]
