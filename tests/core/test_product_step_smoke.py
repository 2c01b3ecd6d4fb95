"""Smoke run of benchmarks/product_step.py on the smoke shape, on CPU: the synthetic build, one
``trinity run`` of examples/gpu/grpo_synthetic_1p5b.yaml through a local Ray (CPU overrides:
no GPU, tiny lengths, eval and checkpoint inside the measured window), and gpu_grpo.py's
colocated step on the same model directory, in one command. No timing is asserted: the split's
keys, that its parts and the unaccounted rest add up to the step, and that the categories the
config makes due were measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "product_step.py"
CATEGORIES = (
    "rollout",
    "reward",
    "explore_other",
    "train",
    "sync",
    "checkpoint",
    "eval",
    "waiting",
    "unaccounted",
)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("product_step")
    out = tmp / "out"
    out.mkdir()
    overrides = [
        "cluster.gpu_per_node=0",  # this machine has no GPU
        "explorer.rollout_model.dtype=float32",
        "buffer.batch_size=2",
        "algorithm.repeat_times=2",
        "model.max_prompt_tokens=16",
        "model.max_response_tokens=4",
        "model.max_model_len=20",
        "trainer.max_token_len_per_gpu=1024",
        "explorer.eval_interval=2",
        "trainer.save_interval=2",
        "explorer.eval_on_startup=false",
    ]
    cmd = [sys.executable, str(SCRIPT), "--shape", "smoke", "--engines", "hf", "--steps", "4"]
    cmd += ["--workdir", str(tmp / "work"), "--prompts", "2", "--group", "2"]
    cmd += ["--prompt-len", "16", "--response-len", "4", "--bench-steps", "1"]
    cmd += ["--trainer-variant", "8:0:auto", "--convert"]
    for o in overrides:
        cmd += ["--override", o]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRINITY_", "RAY_ADDRESS"))}
    env.update(OUT=str(out), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "product_step.json").read_text())


def test_the_product_run_exits_0_and_its_split_adds_up_to_its_step(smoke):
    run = smoke["product"]["hf"]
    assert run["exit_code"] == 0
    assert run["command"].startswith("trinity run --config ")
    assert run["window"] == [2, 4] and run["steps"] == 2  # steps 1 left out as warm-up
    split = run["split_s"]
    assert tuple(split) == CATEGORIES
    # the parts and the unaccounted rest are the step (each rounded to 4 decimals)
    assert sum(split.values()) == pytest.approx(run["step_s"], abs=1e-3)
    # what the window's steps did: generate, score, train, hand weights over, save at step 2
    # (reported with trainer step 3), evaluate at step 2 and 4
    for name in ("rollout", "reward", "train", "sync", "checkpoint", "eval"):
        assert split[name] > 0, (name, split)
    assert split["waiting"] >= 0
    assert run["startup_s"] > 0 and run["tail_s"] > 0 and run["wall_s"] > run["step_s"]


def test_the_benchmark_ran_the_same_shape_and_is_compared(smoke):
    bench = smoke["benchmark"]
    assert smoke["shape"] == "smoke"
    w = bench["workload"]
    assert (w["prompts"], w["group"], w["prompt_len"], w["response_len"]) == (2, 2, 16, 4)
    assert bench["step_s"] == pytest.approx(sum(bench["split_s"].values()), abs=2e-3)
    c = smoke["comparison"]["hf"]
    run = smoke["product"]["hf"]
    assert c["difference_s"] == pytest.approx(run["step_s"] - bench["step_s"], abs=1e-3)
    by = c["difference_by_category_s"]
    # the categories' differences add up to the whole difference
    assert sum(by.values()) == pytest.approx(c["difference_s"], abs=2e-3)
    assert by["reward"] == run["split_s"]["reward"]  # the benchmark scores nothing


def test_the_last_checkpoint_is_converted_and_loads_with_transformers(smoke):
    conv = smoke["product"]["hf"]["convert"]
    assert conv["exit_code"] == 0, conv
    assert conv["command"].startswith("trinity convert --checkpoint-dir ")
    assert "global_step_4" in conv["command"]  # the run's last checkpoint
    assert conv["safetensors_gb"] > 0 and conv["parameters"] > 0
    assert conv["generated_tokens"] == 8 and conv["logits_finite"] is True
