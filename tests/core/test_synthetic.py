"""``trinity init-demo --synthetic``: a random model of a named shape and a GSM8K-shaped taskset
(``rft_core.synthetic``). Written here at the ``smoke`` shape only (the full 1.5B model is 3 GB;
its shape is checked by its parameter count, by hand)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rft_core.config import load_config
from rft_core.config.gpu_fit import parameter_count
from rft_core.errors import DataError
from rft_core.synthetic import SHAPES, build_synthetic

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gpu" / "grpo_synthetic_1p5b.yaml"


def test_the_named_shape_is_qwen2p5_1p5b():
    shape = {**SHAPES["qwen2.5-1.5b"], "model_type": "qwen2"}
    # 1,543,714,304 by hand in test_gpu_fit.py (the model card's 1.54B)
    assert parameter_count(shape) == 1_543_714_304


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic") / "s"
    proc = subprocess.run(
        [sys.executable, "-m", "rft_core.cli", "init-demo", "--synthetic", "smoke"]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"synthetic smoke ready in {out}" in proc.stdout
    return out


def test_the_model_has_the_shape_and_the_prompts_are_128_tokens(built):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = json.loads((built / "model" / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (
        64,
        2,
        151936,
    )
    model = AutoModelForCausalLM.from_pretrained(built / "model")
    assert sum(p.numel() for p in model.parameters()) == parameter_count(config)
    tokenizer = AutoTokenizer.from_pretrained(built / "model")  # as the rollout engine loads it
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id) == (151645, 151643)
    train = pq.read_table(built / "gsm8k" / "main" / "train-00000-of-00001.parquet").to_pylist()
    test = pq.read_table(built / "gsm8k" / "main" / "test-00000-of-00001.parquet").to_pylist()
    assert (len(train), len(test)) == (1024, 32)  # 32 steps of 32 tasks; one eval batch
    for row in train[:5] + test[:5]:
        ids = tokenizer(row["question"])["input_ids"]
        assert len(ids) == 128, row["question"]
        assert tokenizer.decode(ids) == row["question"]
        a, b, total = map(
            int, re.search(r"(\d+) \+ (\d+) = .*#### (\d+)$", row["answer"], re.S).groups()
        )
        assert a + b == total
    # any id a random model samples decodes
    assert isinstance(tokenizer.decode([151000, 70000, 5]), str)


def test_a_rerun_keeps_the_build_and_another_build_needs_force(built):
    before = (built / "model" / "model.safetensors").stat().st_mtime_ns
    build_synthetic(built, "smoke")  # same marker: nothing written
    assert (built / "model" / "model.safetensors").stat().st_mtime_ns == before
    with pytest.raises(DataError, match="another synthetic build.*--force"):
        build_synthetic(built, "smoke", seed=1)
    with pytest.raises(DataError, match="--synthetic 'huge'"):
        build_synthetic(built, "huge")


def test_the_example_config_runs_one_gpu_colocated_on_the_built_dir(built, monkeypatch):
    monkeypatch.setenv("RFT_SYNTHETIC_DIR", str(built))
    cfg = load_config(EXAMPLE)
    assert (cfg.mode, cfg.synchronizer.sync_method, cfg.cluster.gpu_per_node) == (
        "colocate",
        "memory",
        1,
    )
    assert cfg.model.model_path == str(built / "model")
    assert (cfg.buffer.batch_size, cfg.algorithm.repeat_times) == (32, 8)
    assert (cfg.model.max_prompt_tokens, cfg.model.max_response_tokens) == (128, 256)
    assert cfg.trainer.save_interval == cfg.explorer.eval_interval == 8
