"""The configs tests/core loads and runs, as dicts for ``load_config_from_dict``, and the ways
the tests run one: a minimal config that only loads (no model or data behind it), the demo's
taskset, a short GRPO run of the tiny demo model (mode both, 2 tasks x 2 samples, 5 steps), an SFT
stage of it, an ``InProcessRun`` step by step, ``trinity run`` (``--dry-run``, or its output in a
file) in a child process, and the registered
names check of a minimal config naming a workflow, as the CLI and the web make it."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from rft_core.config import load_config_from_dict
from rft_core.config.committed_names import committed_registered_names
from rft_core.config.registered import check_registered_names
from rft_core.registries import registered_names_table

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FROZEN_LAKE_DEMO_CONFIG = EXAMPLES / "demo" / "frozen_lake_demo.yaml"

_MINIMAL = {
    "model": {"model_path": "/models/tiny", "max_model_len": 256, "max_response_tokens": 128},
    "buffer": {
        "batch_size": 4,
        "explorer_input": {
            "taskset": {
                "name": "arith",
                "path": "/data/arith",
                "format": {"prompt_key": "question", "response_key": "answer"},
            }
        },
    },
}


def minimal_config() -> dict:
    """A fresh copy of the smallest config that loads: a model path, a batch size, a taskset."""
    return copy.deepcopy(_MINIMAL)


def demo_taskset(demo, split: str = "train", name: str = "arithmetic", **fields) -> dict:
    """The demo's arithmetic file taskset (its columns and system prompt); ``fields`` follow."""
    from rft_core.demo import DEMO_SYSTEM_PROMPT  # torch and transformers: only where a run is

    return {
        "name": name,
        "storage_type": "file",
        "path": str(demo.dataset_dir),
        "subset_name": "main",
        "split": split,
        "format": {
            "prompt_key": "question",
            "response_key": "answer",
            "system_prompt": DEMO_SYSTEM_PROMPT,
        },
        **fields,
    }


def run_taskset(demo, split: str, name: str) -> dict:
    """The short run's taskset: the demo's, sampled at temperature 1.0 by ``math_workflow``."""
    return demo_taskset(
        demo,
        split,
        name,
        rollout_args={"temperature": 1.0},
        default_workflow_type="math_workflow",
    )


def run_config(demo, root: Path, name: str, **sections) -> dict:
    """A short GRPO run of the demo model under ``root``; ``sections`` update its sections."""
    cfg = {
        "project": "orchestration",
        "name": name,
        "checkpoint_root_dir": str(root),
        "mode": "both",
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "optimizer": {"lr": 1e-4}},
        "model": {"model_path": str(demo.model_dir), "max_response_tokens": 6, "max_model_len": 96},
        "cluster": {"gpu_per_node": 0},
        "buffer": {
            "batch_size": 2,
            "total_steps": 5,
            "explorer_input": {"taskset": run_taskset(demo, "train", "arithmetic")},
            "trainer_input": {"experience_buffer": {"name": "exp", "storage_type": "queue"}},
        },
        "explorer": {"eval_on_startup": False, "eval_interval": 1000},
        "synchronizer": {"sync_method": "nccl", "sync_interval": 1, "sync_offset": 0},
        "trainer": {"save_interval": 0, "save_hf_checkpoint": "never"},
    }
    for key, value in sections.items():
        cfg[key].update(value)
    return cfg


def colocate_eval_config(demo, root: Path, name: str, steps: int, eval_interval: int) -> dict:
    """The short run in one process (``mode: colocate``, weights handed over in memory) of
    ``steps`` steps, with the demo's held-out split evaluated every ``eval_interval`` steps."""
    cfg = run_config(demo, root, name, synchronizer={"sync_method": "memory"})
    cfg["mode"] = "colocate"
    cfg["buffer"]["total_steps"] = steps
    cfg["buffer"]["explorer_input"]["eval_tasksets"] = [run_taskset(demo, "test", "held-out")]
    cfg["explorer"]["eval_interval"] = eval_interval
    return cfg


def sft_stage(path: str | Path, *, total_steps: int = 2, **algorithm) -> dict:
    """An ``sft_warmup`` stage (mode train) of ``total_steps`` SFT steps of 4 rows from the
    messages file at ``path``; ``algorithm`` updates its algorithm section (optimizer, ...)."""
    return {
        "stage_name": "sft_warmup",
        "mode": "train",
        "algorithm": {"algorithm_type": "sft", **algorithm},
        "buffer": {
            "train_batch_size": 4,
            "total_steps": total_steps,
            "trainer_input": {
                "experience_buffer": {
                    "name": "sft",
                    "storage_type": "file",
                    "path": str(path),
                    "format": {"messages_key": "messages"},
                }
            },
        },
    }


def logged_steps(job_dir: Path, role: str) -> list[int]:
    """The steps a run's ``role`` (explorer, trainer) wrote to its monitor metrics file."""
    path = job_dir / "monitor" / f"{role}_metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]


def run_steps(config, on_start: Callable | None = None) -> tuple[list[dict], dict]:
    """An ``InProcessRun`` of ``config`` step by step, closed after (the engine and the OpenAI
    endpoint an agent workflow started on it): its step reports and summaries. ``on_start``
    gets the started run (to look inside it)."""
    from rft_core.runtime.in_process import InProcessRun

    run = InProcessRun(config)
    try:
        run.start()
        if on_start is not None:
            on_start(run)
        reports = []
        while (report := run.step()) is not None:
            reports.append(report)
        return reports, run.finish()
    finally:
        run.close()


def trinity_run(config: Path, *args: str, **options) -> subprocess.CompletedProcess:
    """``trinity run --config CONFIG ARGS`` in a child Python, its output as text; ``options``
    go to ``subprocess.run`` (env, cwd, timeout)."""
    return subprocess.run(
        [sys.executable, "-m", "rft_core.cli", "run", "--config", str(config), *args],
        capture_output=True,
        text=True,
        **options,
    )


def trinity_run_to_file(config: Path, log_file: Path, *args: str, **options) -> int:
    """``trinity run --config CONFIG ARGS > LOG_FILE 2>&1`` in a child Python (its output not
    a terminal, as under nohup or Slurm); returns its exit code. ``options`` as ``trinity_run``."""
    with log_file.open("w") as out:
        return subprocess.run(
            [sys.executable, "-m", "rft_core.cli", "run", "--config", str(config), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            **options,
        ).returncode


def dry_run(config: Path, *overrides: str, **options) -> subprocess.CompletedProcess:
    """``trinity run --config CONFIG --dry-run OVERRIDES`` (``trinity_run``)."""
    return trinity_run(config, "--dry-run", *overrides, **options)


def workflow_config(workflow: str, **taskset):
    """The minimal config, loaded, its training taskset run by ``workflow`` with ``taskset``'s
    fields."""
    d = minimal_config()
    d["buffer"]["explorer_input"]["taskset"].update(default_workflow_type=workflow, **taskset)
    return load_config_from_dict(d)


def check_names(cfg) -> None:
    """The registered names check of ``cfg`` on the live registries (the CLI's) and on the
    committed table (the web's)."""
    check_registered_names(cfg, registered_names_table())
    check_registered_names(cfg, committed_registered_names())
