"""``trinity run`` before any actor starts: dry run, fail-fast checks, Ray address, renames."""

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rft_core.config import load_config
from rft_core.errors import ConfigError, ServiceUnavailable
from rft_core.runtime.launcher import _rename_if_occupied, cli_run, start_ray
from rft_core.runtime.preflight import preflight

ROOT = Path(__file__).resolve().parents[3]
SEED = ROOT / "examples" / "grpo_gsm8k" / "gsm8k.yaml"
DEMO = ROOT / "examples" / "demo" / "grpo_demo.yaml"


def _trinity(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {
        k: v for k, v in os.environ.items() if not k.startswith(("TRINITY_", "RAY_ADDRESS"))
    }
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "rft_core.cli", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_seed_config_fails_fast_on_cpu_with_one_clear_message(tmp_path):
    proc = _trinity("run", "--config", str(SEED), cwd=tmp_path)
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    # names the model path and says how to get it, and the GPUs the config asks for
    assert "model.model_path" in err and "Qwen/Qwen2.5-1.5B-Instruct" in err
    assert "huggingface-cli download" in err
    assert "cluster.gpu_per_node" in err and "2 GPU" in err
    # nothing was started or written
    assert not (tmp_path / "checkpoints").exists()


def test_seed_config_with_a_real_model_dir_still_names_the_missing_gpus(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    cfg = load_config(SEED, [f"model.model_path={model}"])
    with pytest.raises(ConfigError) as info:
        preflight(cfg)
    assert "model.model_path" not in str(info.value)
    assert "cluster.gpu_per_node" in str(info.value)
    assert "gpu_per_node: 0" in str(info.value)


def test_dry_run_prints_the_resolved_config_and_exits_0(tmp_path, capsys):
    args = argparse.Namespace(config=str(DEMO), dry_run=True, overrides=["buffer.batch_size=4"])
    assert cli_run(args) == 0
    out = capsys.readouterr().out
    assert "batch_size: 4" in out
    assert "stage_name: sft_warmup" in out
    assert not (tmp_path / "checkpoints").exists()


def test_dry_run_of_a_broken_config_exits_non_zero_naming_the_path(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(DEMO.read_text().replace("  batch_size: 8", "  batch_sise: 8"))
    proc = _trinity("run", "--config", str(bad), "--dry-run", cwd=tmp_path)
    assert proc.returncode != 0
    assert "buffer.batch_sise" in proc.stderr and "batch_size" in proc.stderr


@pytest.mark.parametrize(
    ("override", "path", "listed"),
    [
        (
            "buffer.explorer_input.taskset.default_workflow_type=math_wrkflow",
            "buffer.explorer_input.taskset.default_workflow_type",
            "did you mean 'math_workflow'",
        ),
        (
            "buffer.explorer_input.taskset.default_reward_fn_type=math_rewrd",
            "buffer.explorer_input.taskset.default_reward_fn_type",
            "math_reward",
        ),
        ("stages[1].algorithm.advantage_fn=grpoo", "stages[1].algorithm.advantage_fn", "grpo"),
        ("stages[1].algorithm.policy_loss_fn=ppoo", "stages[1].algorithm.policy_loss_fn", "ppo"),
    ],
)
def test_unregistered_names_fail_the_dry_run_and_the_run_before_ray(
    tmp_path, override, path, listed
):
    for extra in (["--dry-run"], []):
        proc = _trinity("run", "--config", str(DEMO), *extra, override, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr[-2000:]
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith(f"trinity run: error: {path}: ") and listed in last
    assert not (tmp_path / "checkpoints").exists()  # nothing started, nothing written


def test_a_directory_as_config_names_the_yaml_files_in_it(tmp_path):
    proc = _trinity("run", "--config", str(DEMO.parent), "--dry-run", cwd=tmp_path)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert "is a directory; give the path of a YAML file" in last and "grpo_demo.yaml" in last


def test_an_sft_file_without_the_columns_its_format_names_fails_before_ray(tmp_path):
    bad = tmp_path / "sft.jsonl"
    bad.write_text('{"foo": 1}\n{"foo": 2}\n')
    override = f"stages[0].buffer.trainer_input.experience_buffer.path={bad}"
    proc = _trinity("run", "--config", str(DEMO), override, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "stages[0].buffer.trainer_input.experience_buffer.format." in last
    assert "columns present: foo" in last
    assert not (tmp_path / "checkpoints").exists()


def test_unreachable_ray_address_is_a_service_error_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    cfg = load_config(DEMO)
    with pytest.raises(ServiceUnavailable) as info:
        start_ray(cfg)
    assert "127.0.0.1:1" in str(info.value)
    assert "ray start --head" in str(info.value)


def test_a_job_server_address_joins_that_heads_cluster(monkeypatch):
    from rft_core.runtime.ray_cluster import ray_address

    monkeypatch.setenv("RAY_ADDRESS", "http://ray-head.internal:8265")
    assert ray_address(load_config(DEMO)) == "ray-head.internal:6379"
    cfg = load_config(DEMO, ["cluster.ray_address=ray://other:10001"])
    assert ray_address(cfg) == "ray://other:10001"  # the config's own address wins
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert ray_address(cfg) == "10.0.0.5:6379"  # a joinable RAY_ADDRESS wins, as before


def test_continue_from_checkpoint_false_renames_loudly_never_silently(tmp_path, capsys):
    cfg = load_config(DEMO, [f"checkpoint_root_dir={tmp_path}", "continue_from_checkpoint=false"])
    assert _rename_if_occupied(cfg) is None  # empty job dir: nothing to do
    Path(cfg.job_dir).mkdir(parents=True)
    (Path(cfg.job_dir) / "explorer_meta.json").write_text("{}")
    old_dir = Path(cfg.job_dir)
    assert _rename_if_occupied(cfg) == "grpo_demo"
    assert cfg.name.startswith("grpo_demo_") and Path(cfg.job_dir) != old_dir
    assert (old_dir / "explorer_meta.json").exists()  # the old run is untouched
    assert "continue_from_checkpoint is false" in capsys.readouterr().err


def test_a_renamed_staged_run_writes_its_stages_under_the_new_name(tmp_path):
    from rft_core.config import resolve_stages

    cfg = load_config(DEMO, [f"checkpoint_root_dir={tmp_path}", "continue_from_checkpoint=false"])
    old_dir = Path(cfg.job_dir)
    old_dir.mkdir(parents=True)
    (old_dir / "run_meta.json").write_text("{}")
    assert _rename_if_occupied(cfg) == "grpo_demo"
    stages = resolve_stages(cfg)
    assert len(stages) == 2
    for stage in stages:  # not into the old job dir the message says is left untouched
        assert Path(stage.job_dir).parent == Path(cfg.job_dir), stage.job_dir


def test_a_resumed_explorer_restarts_after_the_experiences_the_checkpoint_trained_on():
    from rft_core.config import resolve_stages
    from rft_core.sync.schedule import explorer_resume_step

    # the demo's GRPO stage: 8 tasks x 8 samples = 64 experiences an explorer step
    for train_batch, trainer_step, explorer_step in (
        (64, 6, 6),
        (32, 6, 3),
        (16, 5, 1),
        (64, 0, 0),
    ):
        cfg = load_config(DEMO, [f"buffer.train_batch_size={train_batch}"])
        rft = resolve_stages(cfg)[1]
        per_step = (rft.buffer.batch_size, rft.algorithm.repeat_times, rft.buffer.train_batch_size)
        assert explorer_resume_step(trainer_step, *per_step) == explorer_step, train_batch


def test_a_staged_config_is_validated_once_per_run(tmp_path, monkeypatch, caplog):
    """Load, the registered-names check and the launcher all read the stages the load
    validated: the inherited save_hf_checkpoint fix is warned about once, not three times."""
    import logging

    from rft_core.config import check_registered_names, resolve_stages
    from rft_core.registries import registered_names_table

    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="rft_core.config"):
        cfg = load_config(DEMO, ["trainer.save_hf_checkpoint=never"])
        check_registered_names(cfg, registered_names_table())
        sft, rft = resolve_stages(cfg)
    fixed = [r for r in caplog.records if "save_hf_checkpoint never -> last" in r.getMessage()]
    assert len(fixed) == 1 and "'sft_warmup'" in fixed[0].getMessage()
    assert sft.trainer.save_hf_checkpoint == "last" and rft.trainer.save_hf_checkpoint == "never"
    sft.model.model_path = "/elsewhere"  # a run sets a later stage's model on its own copy
    assert resolve_stages(cfg)[0].model.model_path != "/elsewhere"


def test_the_preflight_reads_each_taskset_once_for_the_whole_run(tmp_path, monkeypatch):
    """The tasksets the preflight reads are the explorer's: rollout steps and evals read no
    file again (the explorer used to re-read the training taskset, and each eval taskset at
    every eval)."""
    from run_configs import run_config, run_taskset

    from rft_core.config import load_config_from_dict
    from rft_core.data import source
    from rft_core.demo import build_demo
    from rft_core.explorer.explorer import Explorer

    demo = build_demo(tmp_path / "demo")
    buffer = {
        "explorer_input": {
            "taskset": run_taskset(demo, "train", "arithmetic"),
            "eval_tasksets": [run_taskset(demo, "test", "held-out")],
        },
        "trainer_input": {
            "experience_buffer": {
                "name": "exp",
                "storage_type": "file",
                "path": str(tmp_path / "exp.jsonl"),
            }
        },
    }
    cfg = load_config_from_dict(
        {
            **run_config(demo, tmp_path, "read-once", buffer=buffer),
            "monitor": {"monitor_type": "none"},
        }
    )
    reads: list[str] = []
    read_rows = source.read_rows
    monkeypatch.setattr(
        source, "read_rows", lambda path, *a, **k: reads.append(path) or read_rows(path, *a, **k)
    )
    datasets = preflight(cfg)
    assert len(reads) == 2  # the training taskset and the eval taskset
    assert [len(t) for t in datasets.tasksets.training] == [
        len(read_rows(demo.dataset_dir, "main", "train"))
    ]
    explorer = Explorer(cfg, tasksets=datasets.tasksets)
    try:
        explorer._build(0, 0, None)
        for _ in range(2):
            explorer.explore_step(explorer._reader.next_batch())
            explorer.evaluate(explorer.step)
    finally:
        explorer.close_engine()
        explorer._buffer.close()
        explorer.close()
    assert sorted(explorer.eval_results) == [1, 2] and explorer.step == 2
    assert len(reads) == 2


def test_an_actor_that_never_ran_is_reported_with_rays_reason():
    from rft_core.runtime.stage import _one_line

    message = (
        "The actor died unexpectedly before finishing this task.\n"
        "\tclass_name: Trainer\n\tactor_id: 1f2e\n"
        "The actor died because its worker process failed to register within 60 s.\n"
        "The actor never ran - it was cancelled before it started running."
    )
    line = _one_line(RuntimeError(message))
    assert line == (
        "RuntimeError: The actor died because its worker process failed to register within "
        "60 s. (The actor never ran - it was cancelled before it started running.)"
    )
    assert _one_line(ValueError("first\nlast")) == "ValueError: last"
