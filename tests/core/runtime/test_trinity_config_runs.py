"""Every Trinity-RFT example config of ``trinity_configs/`` that loads also *runs*: two steps on
the CPU with the tiny demo model, reached the way a user reaches their own machine, through the
environment variables the example reads (``TRINITY_MODEL_PATH``, ``TRINITY_TASKSET_PATH``,
``TRINITY_CHECKPOINT_ROOT_DIR``) and dotted overrides (``trinity run ... key=value``): one task
x two samples per step, six response tokens, explorer and trainer in one process (the code path
of ``mode: colocate``, no Ray). The config's own algorithm, workflow, reward and loss settings
stay as written; what an override replaces is only what points at a GPU machine (model, data,
lengths, batch sizes, engines, monitor) and the data columns of the demo's datasets.

A config with rollouts runs in one process (``InProcessRun``); one that trains from a dataset
(sft, dpo) runs the trainer alone, in its written mode. A config that cannot run here goes into
``CANNOT_RUN`` with the one line the run refuses it with, asserted, never skipped (none today).
A config the loader newly accepts is in ``ACCEPTED`` and so runs here too."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from run_configs import run_steps
from toolace import TOOLACE_ROW
from trinity_corpus import ACCEPTED

from rft_core.config import load_config
from rft_core.errors import RFTError

# the demo's datasets: taskset overrides per config (columns as the demo writes them)
GSM8K = ["subset_name=main", "format.prompt_key=question", "format.response_key=answer"]
COUNTDOWN = GSM8K
FROZEN_LAKE = ["format.prompt_key=prompt", "format.response_key=''", "workflow_args.max_steps=2"]
DATA = {
    "ppo_countdown": ("countdown_dir", COUNTDOWN),
    "ppo_countdown_exp_replay": ("countdown_dir", COUNTDOWN),
    "grpo_frozen_lake": ("frozen_lake_dir", FROZEN_LAKE),
    "grpo_toolcall": (None, []),  # ToolACE rows written by the test
}

# config -> (YAML path, text) of the one line that refuses it on this machine
CANNOT_RUN: dict[str, tuple[str, str]] = {}


def _overrides(cfg_stem: str, raw_taskset_keys: bool, demo, root: Path) -> list[str]:
    ts = "buffer.explorer_input.taskset"
    attr, columns = DATA.get(cfg_stem, ("dataset_dir", GSM8K))
    out = [f"checkpoint_root_dir={root}"]
    if raw_taskset_keys:  # explorer and trainer in this process; a dataset-only run trains alone
        out += [
            "mode=colocate",
            "synchronizer.sync_method=memory",
            "synchronizer.sync_interval=1",
            "synchronizer.sync_offset=0",
        ]
    out += [
        f"model.model_path={demo.model_dir}",
        "model.max_model_len=96",
        "model.max_prompt_tokens=90",
        "model.max_response_tokens=6",
        "cluster.node_num=1",
        "cluster.gpu_per_node=0",
        "explorer.rollout_model.engine_type=hf",
        "explorer.rollout_model.engine_num=1",
        "explorer.rollout_model.tensor_parallel_size=1",
        "explorer.eval_on_startup=false",
        "explorer.eval_interval=1000",
        "buffer.total_steps=2",
        "buffer.batch_size=1",
        "buffer.train_batch_size=2",
        "buffer.explorer_input.eval_tasksets=[]",
        "trainer.save_interval=0",
        "trainer.save_hf_checkpoint=never",
        "monitor.monitor_type=tensorboard",
    ]
    if raw_taskset_keys:
        out += [
            "algorithm.repeat_times=2",
            *([f"{ts}.path={getattr(demo, attr)}", f"{ts}.split=train"] if attr else []),
            f"{ts}.rollout_args.max_tokens=6",
            *(f"{ts}.{c}" for c in columns),
        ]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("path", ACCEPTED, ids=[f.stem for f in ACCEPTED])
def test_a_loading_trinity_config_runs_two_steps_on_the_demo_model(
    demo, tmp_path, monkeypatch, path
):
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(demo.model_dir))
    monkeypatch.setenv("TRINITY_TASKSET_PATH", str(demo.dataset_dir))
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path))
    monkeypatch.setenv("TRINITY_SFT_DATASET_PATH", str(demo.sft_path))
    if path.stem == "grpo_toolcall":  # ToolACE's columns (toolace.py); prompts truncated
        (tmp_path / "toolace.jsonl").write_text((json.dumps(TOOLACE_ROW) + "\n") * 4)
    if path.stem == "dpo_humanlike":  # its preference rows come from TRINITY_TASKSET_PATH
        rows = [{"prompt": f"{i}+{i}=?", "chosen": str(2 * i), "rejected": "7"} for i in range(4)]
        pairs = tmp_path / "pairs.jsonl"
        pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
        monkeypatch.setenv("TRINITY_TASKSET_PATH", str(pairs))
    written = load_config(path)
    rollouts = written.buffer.explorer_input.taskset is not None
    overrides = _overrides(path.stem, rollouts, demo, tmp_path)
    if path.stem == "grpo_toolcall":
        overrides.append(f"buffer.explorer_input.taskset.path={tmp_path / 'toolace.jsonl'}")
    if written.trainer.total_steps is not None:
        overrides.append("trainer.total_steps=2")
    if "sft_dataset" in (written.buffer.trainer_input.auxiliary_buffers or {}):
        # mix_chord's expert rows: the demo's SFT messages
        overrides.append(f"buffer.trainer_input.auxiliary_buffers.sft_dataset.path={demo.sft_path}")
    if path.stem in CANNOT_RUN:
        where, text = CANNOT_RUN[path.stem]
        with pytest.raises(RFTError) as info:
            _run(load_config(path, overrides))
        assert str(info.value).startswith(f"{where}: ") and text in str(info.value)
        return
    cfg = load_config(path, overrides)
    assert cfg.algorithm.algorithm_type == written.algorithm.algorithm_type  # kept as written
    if rollouts:
        reports, summaries = _run(cfg)
        assert summaries["trainer"]["steps"] == 2
    else:  # sft / dpo from a dataset: the trainer alone (mode train, as written)
        from rft_core.trainer.trainer import Trainer

        trainer = Trainer(cfg)
        try:
            assert trainer.run()["steps"] == 2
        finally:
            trainer.close()
        lines = (Path(cfg.job_dir) / "monitor" / "trainer_metrics.jsonl").read_text().splitlines()
        reports = [json.loads(line) for line in lines if line.strip()]
    trained = [r for r in reports if any(k.startswith("actor/") for k in r)]
    assert len(trained) == 2, [sorted(r) for r in reports]
    for r in trained:
        losses = [k for k in r if k.startswith("actor/") and k.endswith("_loss")]
        assert losses and all(math.isfinite(r[k]) for k in losses), r


def _run(cfg):
    def check_the_queue(run) -> None:
        replay = cfg.buffer.trainer_input.experience_buffer.replay_buffer
        if replay is not None and replay.enable:
            from rft_core.buffer.replay import ReplayQueue

            # the queue between them is Trinity's priority replay queue (rft_core.buffer.replay)
            assert isinstance(run.explorer._buffer._local, ReplayQueue)

    return run_steps(cfg, on_start=check_the_queue)
