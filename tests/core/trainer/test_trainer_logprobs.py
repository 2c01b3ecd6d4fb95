"""The trainer's log-probs of the rollouts the explorer kept for the dashboard
(``rft_core.explorer.rollout_samples.trainer_samples``): a real one-step run of the demo model in one
process writes ``monitor/trainer_samples.jsonl``; each entry's ``trainer_logprobs`` equals the
log-probs worked by hand with plain transformers on the same prompt and response ids (read
from the experience buffer's mirror) under the weights the step started from (the demo
model's own: one step, so nothing was trained before it).

Tolerance: the entries are rounded to 4 decimals (±5e-5) and the trainer runs the rows as a
padded micro-batch, the hand computation one row alone; float32 kernels of another CPU path
(``ATEN_CPU_CAPABILITY=default|avx2|avx512``) move a log-prob by ~1e-6, so 2e-4 holds on each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from run_configs import run_config
from transformers import AutoModelForCausalLM

from rft_core.config import load_config_from_dict
from rft_core.runtime.in_process import InProcessRun

KEPT = 4  # monitor.rollout_samples_per_step: two groups of repeat_times 2


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_the_trainers_logprobs_of_kept_rollouts_match_a_hand_computation(demo, tmp_path):
    mirror = tmp_path / "experiences.jsonl"
    cfg = run_config(demo, tmp_path, "trainer_logprobs", synchronizer={"sync_method": "memory"})
    cfg["mode"] = "colocate"
    cfg["buffer"]["total_steps"] = 1
    cfg["buffer"]["batch_size"] = 3  # 6 rollouts, of which the first 2 groups (4) are kept
    cfg["buffer"]["trainer_input"]["experience_buffer"]["path"] = str(mirror)
    cfg["model"]["max_response_tokens"] = 12
    cfg["monitor"] = {"rollout_samples_per_step": KEPT}
    InProcessRun(load_config_from_dict(cfg)).run()

    monitor = tmp_path / "orchestration" / "trainer_logprobs" / "monitor"
    kept = _rows(monitor / "explorer_samples.jsonl")
    recorded = _rows(monitor / "trainer_samples.jsonl")
    assert [e["sample_index"] for e in kept] == list(range(KEPT))
    # one entry per kept rollout (the other 2 rollouts of the step are not recorded)
    assert sorted(e["sample_index"] for e in recorded) == list(range(KEPT))
    assert {(e["explorer_step"], e["trainer_step"], e["step"]) for e in recorded} == {(1, 1, 1)}

    experiences = {
        row["info"]["rollout_sample"]: row
        for row in _rows(mirror)
        if row["info"].get("rollout_sample") is not None
    }
    model = AutoModelForCausalLM.from_pretrained(demo.model_dir, dtype=torch.float32).eval()
    for entry in recorded:
        exp = experiences[entry["sample_index"]]
        sample = kept[entry["sample_index"]]
        prompt, response = exp["prompt_ids"], exp["response_ids"]
        assert len(entry["trainer_logprobs"]) == len(response) == len(sample["tokens"]) > 0
        with torch.no_grad():
            logits = model(torch.tensor([prompt + response])).logits[0].float()
        # the token at position t is predicted by the logits at t - 1
        by_hand = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
        by_hand = by_hand.gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1)
        assert entry["trainer_logprobs"] == pytest.approx(by_hand.tolist(), abs=2e-4)
        # the engine sampled with the same weights: its log-probs agree within the same bound
        assert sample["logprobs"] == pytest.approx(by_hand.tolist(), abs=2e-4)
