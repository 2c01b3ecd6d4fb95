"""Smoke run of benchmarks/vllm_engine.py (``--smoke``: tiny random model, 2 prompts x 2
samples) against the fake vLLM of ``tests/core/fake_vllm`` (vLLM cannot be installed on this CPU
machine): the script runs end to end and prints every figure, so it is not dead code before its
H200 run. No timing is asserted; the fake computes nothing with its weights."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "vllm_engine.py"
FAKE_VLLM = Path(__file__).parent / "fake_vllm"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict, dict]:
    tmp = tmp_path_factory.mktemp("vllm_bench")
    out_dir = tmp / "out"
    out_dir.mkdir()
    cmd = [sys.executable, str(SCRIPT), "--smoke", "--model-root", str(tmp / "model")]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(FAKE_VLLM), str(REPO)]),
        "OUT": str(out_dir),
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout, json.loads((out_dir / "vllm_engine.json").read_text()), env


def test_it_prints_both_rollout_figures_and_their_ratio(smoke):
    stdout, figures, _ = smoke
    direct = re.search(r"^rollout direct: ([0-9.]+) tokens/s \((\d+) tokens\)", stdout, re.M)
    adapter = re.search(r"^rollout adapter: ([0-9.]+) tokens/s \((\d+) tokens\)", stdout, re.M)
    ratio = re.search(r"^ratio adapter/direct: ([0-9.]+)", stdout, re.M)
    assert direct and adapter and ratio, stdout
    # the same call on both sides: 2 prompts x 2 samples x 4 forced tokens = 16 tokens
    assert int(direct.group(2)) == int(adapter.group(2)) == 16
    r = figures["rollout"]
    assert figures["adapter_over_direct"] == pytest.approx(
        r["adapter"]["tokens_per_s"] / r["direct"]["tokens_per_s"], rel=1e-3
    )
    assert figures["vllm_version"] == "0.26.0"


def test_it_measures_weight_sync_into_vllm_by_bucket_handles(smoke):
    stdout, figures, _ = smoke
    ws = figures["weight_sync"]
    assert ws["path"] == "ipc"  # the fake's engine core is "another process" by default
    assert ws["awake_best_s"] > 0 and ws["asleep_best_s"] > 0 and ws["time/sync_weight"] > 0
    assert ws["tensors"] > 0 and ws["bytes"] > 0
    assert re.search(r"^weight sync \(ipc, .*awake [0-9.]+ s, after sleep [0-9.]+ s", stdout, re.M)


def test_a_greedy_group_of_four_comes_back_as_four_identical_responses(smoke):
    _, figures, _ = smoke
    assert "errors" not in figures, figures.get("errors")
    g = figures["greedy_group"]
    assert g["groups"] == 2 and g["sizes"] == [4, 4]
    assert g["identical_within_group"] is True and g["logprobs_per_token"] is True
