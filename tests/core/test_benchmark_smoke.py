"""Smoke run of benchmarks/grpo_cpu.py with tiny sizes: both sides run the same workload in one
process and the script prints both figures and their ratio. No timing is asserted."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "grpo_cpu.py"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    tmp = tmp_path_factory.mktemp("grpo_bench")
    figures = tmp / "figures.json"
    cmd = [sys.executable, str(SCRIPT), "--prompts", "2", "--group", "3", "--response-len", "6"]
    cmd += ["--steps", "2", "--warmup", "1", "--threads", "1", "--demo-dir", str(tmp / "demo")]
    cmd += ["--json", str(figures)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout, json.loads(figures.read_text())


def test_it_prints_seconds_per_step_for_both_sides_and_their_ratio(smoke):
    stdout, _ = smoke
    rft = re.search(r"^rft_core: ([0-9.]+) s/step", stdout, re.M)
    trl = re.search(r"^TRL: ([0-9.]+) s/step", stdout, re.M)
    ratio = re.search(r"^ratio TRL/rft_core: ([0-9.]+)x", stdout, re.M)
    assert rft and trl and ratio, stdout
    assert float(rft.group(1)) > 0 and float(trl.group(1)) > 0
    # the printed ratio is the printed figures' quotient (up to their 3-decimal rounding)
    assert float(ratio.group(1)) == pytest.approx(
        float(trl.group(1)) / float(rft.group(1)), rel=0.05, abs=0.02
    )


def test_both_sides_ran_the_same_workload(smoke):
    _, figures = smoke
    w = figures["workload"]
    assert (w["prompts"], w["group"], w["response_len"], w["threads"]) == (2, 3, 6, 1)
    rft, trl = figures["results"]["rft_core"], figures["results"]["TRL"]
    for side in (rft, trl):
        assert len(side["step_seconds"]) == 2 and len(side["warmup_seconds"]) == 1
        assert all(s > 0 for s in side["step_seconds"] + side["warmup_seconds"])
        # every step scored prompts × group responses: 2 × 3
        assert side["notes"]["responses_per_step"] == [6, 6, 6]
    assert figures["ratio_trl_over_rft_core"] == pytest.approx(
        trl["s_per_step"] / rft["s_per_step"]
    )
    assert figures["schedule"] == "interleaved"


def test_it_rejects_a_group_of_one():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--group", "1"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert "--group must be at least 2" in proc.stderr
