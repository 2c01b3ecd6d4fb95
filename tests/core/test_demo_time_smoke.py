"""Smoke run of benchmarks/demo_time.py on a shortened demo (4 SFT steps, 2 GRPO steps): it
reports each stage's wall time from the job's monitor files, the first reward point, the load
and the held-out accuracy curve, in print and in its JSON. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "demo_time.py"


def test_it_times_each_stage_and_reads_the_accuracy_curve(tmp_path):
    out = tmp_path / "demo_time.json"
    cmd = [sys.executable, str(SCRIPT), "--json", str(out), "stages[0].buffer.total_steps=4"]
    cmd += ["buffer.total_steps=2", "explorer.eval_interval=2"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (result,) = json.loads(out.read_text())
    assert result["path"] == "machine" and result["returncode"] == 0
    assert list(result["stages"]) == ["sft_warmup", "rft"]  # in the order they ran
    sft, rft = result["stages"]["sft_warmup"], result["stages"]["rft"]
    assert 0 <= sft["from_s"] < sft["to_s"] <= rft["from_s"] < rft["to_s"] < result["total_s"]
    learned = result["learning"]
    assert learned["stage"] == "rft"
    assert [step for step, _ in learned["evals"]] == [0, 2]  # eval on startup, then at step 2
    assert learned["lift"] == learned["after_grpo"] - learned["sft_end"]
    assert 0 < learned["first_reward_s"] < result["total_s"]
    assert set(result["load"]) == {"before", "during", "after"}
    assert "sft_warmup" in proc.stdout and "held-out accuracy" in proc.stdout
