"""A config against the GPUs it runs on (``rft_core.config.gpu_fit``): mode both on one GPU runs
colocated with one warning line; more GPUs than the cluster has, ``tensor_parallel_size`` beyond
an engine's GPUs and weights beyond ``gpu_memory_utilization`` are one line naming the key.

This machine has no GPU: the GPU counts and the GPU memory are the functions' parameters, given
here by hand (on a GPU the launcher passes ``torch.cuda.device_count()``,
``ray.cluster_resources()["GPU"]`` and the device's ``total_memory``). The config's
``cluster.gpu_per_node`` needs no GPU to be read. ``engine_type: auto`` with vLLM importable uses
the repository's fake vllm package (tests/core/fake_vllm; no real vLLM on a CPU machine)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from run_configs import minimal_config

from rft_core.config import load_config, load_config_from_dict, resolve_stages
from rft_core.config.gpu_fit import (
    cluster_gpu_problem,
    colocate_memory_problem,
    memory_fit_problem,
    one_gpu_change,
    parameter_count,
    weights_bytes,
)
from rft_core.config.resources import auto_engine_type
from rft_core.errors import ConfigError
from rft_core.runtime.preflight import check_joined_cluster

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "examples" / "demo" / "grpo_demo.yaml"
FAKE_VLLM = Path(__file__).parents[1] / "fake_vllm"
GIB = 1024**3

MINIMAL = minimal_config()
# Qwen2.5-1.5B's config.json (the shape keys; Qwen/Qwen2.5-1.5B on the Hub)
QWEN_1P5B = {
    "model_type": "qwen2",
    "hidden_size": 1536,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "intermediate_size": 8960,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}


def config(mode="both", gpus=1, nodes=1, sync=None, **rollout):
    d = dict(MINIMAL, mode=mode, cluster={"node_num": nodes, "gpu_per_node": gpus})
    if sync:
        d["synchronizer"] = {"sync_method": sync}
    d["explorer"] = {"rollout_model": {"engine_type": "hf", **rollout}}
    return load_config_from_dict(d)


# ---------------------------------------------------------------- mode both on one GPU


@pytest.mark.parametrize(
    ("sync", "expected_sync"), [(None, "memory"), ("nccl", "memory"), ("checkpoint", "checkpoint")]
)
def test_mode_both_on_one_gpu_runs_colocated_with_one_warning(caplog, sync, expected_sync):
    with caplog.at_level(logging.WARNING, logger="rft_core.config"):
        cfg = config(sync=sync)
    assert (cfg.mode, cfg.synchronizer.sync_method) == ("colocate", expected_sync)
    (line,) = [r.getMessage() for r in caplog.records if "colocate" in r.getMessage()]
    assert "cluster has 1" in line and "mode colocate" in line
    assert f"write mode: colocate and synchronizer.sync_method: {expected_sync}" in line


@pytest.mark.parametrize(
    ("mode", "gpus", "nodes", "extra"),
    [
        ("both", 2, 1, {}),  # a GPU each: mode both as written
        ("both", 0, 1, {}),  # CPU: two processes need no GPU
        ("both", 1, 2, {}),  # 2 nodes x 1 GPU = 2 GPUs
        ("explore", 1, 1, {}),  # no trainer in the job
    ],
)
def test_other_shapes_run_as_written(mode, gpus, nodes, extra):
    d = dict(MINIMAL, mode=mode, cluster={"node_num": nodes, "gpu_per_node": gpus})
    d["explorer"] = {"rollout_model": {"engine_type": "hf"}}
    if mode == "explore":
        d["buffer"] = dict(
            MINIMAL["buffer"],
            trainer_input={
                "experience_buffer": {"name": "e", "storage_type": "sql", "path": "sqlite:///e.db"}
            },
        )
    assert load_config_from_dict(d).mode == mode


def test_one_gpu_with_two_engines_is_not_colocated_but_named():
    cfg = config(gpus=2)  # valid; then shaped by hand as one GPU with two engines
    cfg.cluster.gpu_per_node, cfg.explorer.rollout_model.engine_num = 1, 2
    assert one_gpu_change(cfg) is None
    with pytest.raises(ConfigError) as info:
        config(engine_num=2)
    assert info.value.path == "explorer.rollout_model.engine_num"


def test_mode_colocate_picks_memory_sync_and_reads_nccl_as_memory(caplog):
    assert config(mode="colocate").synchronizer.sync_method == "memory"
    with caplog.at_level(logging.WARNING):  # as Trinity-RFT's validator does, with a warning
        assert config(mode="colocate", sync="nccl").synchronizer.sync_method == "memory"
    assert "sync_method nccl broadcasts between a running explorer and trainer" in caplog.text
    assert "read as memory in mode colocate" in caplog.text


def test_engine_type_auto_with_vllm_importable_on_one_gpu_picks_hf_and_colocates(monkeypatch):
    # hf measured 2-3.9x vLLM's tokens/s on one H200 (resources.auto_engine_type)
    monkeypatch.syspath_prepend(str(FAKE_VLLM))
    try:
        d = dict(MINIMAL, mode="both", cluster={"node_num": 1, "gpu_per_node": 1})
        cfg = load_config_from_dict(d)  # engine_type left at its default, auto
        assert cfg.explorer.rollout_model.engine_type == "hf"
        assert (cfg.mode, cfg.synchronizer.sync_method) == ("colocate", "memory")
    finally:
        for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            del sys.modules[name]


def test_engine_type_auto_with_vllm_importable_picks_vllm_for_an_engine_over_two_gpus(
    monkeypatch,
):
    monkeypatch.syspath_prepend(str(FAKE_VLLM))
    try:
        rollout = {"rollout_model": {"tensor_parallel_size": 2}}
        d = dict(MINIMAL, mode="both", cluster={"node_num": 1, "gpu_per_node": 4})
        d["explorer"] = {**d.get("explorer", {}), **rollout}
        cfg = load_config_from_dict(d)
        assert cfg.explorer.rollout_model.engine_type == "vllm"
    finally:
        for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            del sys.modules[name]


@pytest.mark.parametrize(
    "gpus, tp, installed, engine",
    [
        (0, 1, True, "hf"),
        (1, 1, True, "hf"),
        (8, 1, True, "hf"),
        (8, 2, True, "vllm"),
        (8, 2, False, "hf"),
        (0, 2, True, "hf"),
    ],
)
def test_auto_engine_type_table(gpus, tp, installed, engine):
    assert auto_engine_type(gpus, tp, installed) == engine


def test_the_demo_config_on_one_gpu_needs_only_the_gpu_count(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    sft, rft = resolve_stages(load_config(DEMO, ["cluster.gpu_per_node=1"]))
    assert sft.mode == "train"  # the SFT stage has no explorer: nothing to adapt
    # the demo writes mode both and sync_method nccl: the GRPO stage runs colocated
    assert (rft.mode, rft.synchronizer.sync_method) == ("colocate", "memory")


def _trinity(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRINITY_", "RAY_ADDRESS"))}
    return subprocess.run(
        [sys.executable, "-m", "rft_core.cli", *args],
        cwd=cwd,
        env={**env, "RFT_DEMO_DIR": str(cwd / "demo")},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli_one_gpu_demo_warns_once_and_this_cpu_machine_stops_naming_the_gpus(tmp_path):
    # the dry run resolves the stages: one warning line (the GRPO stage), exit 0
    proc = _trinity(
        "run", "--config", str(DEMO), "--dry-run", "cluster.gpu_per_node=1", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    warnings = [ln for ln in proc.stderr.splitlines() if "colocate" in ln]
    assert len(warnings) == 1, proc.stderr
    assert "running mode colocate" in warnings[0] and "nccl -> memory" in warnings[0]
    # a real run on this machine (0 CUDA devices): one error line naming the key, exit 2
    model = tmp_path / "demo" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    proc = _trinity("run", "--config", str(DEMO), "cluster.gpu_per_node=1", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "cluster.gpu_per_node" in errors[0] and "= 1 GPU(s) requested" in errors[0]
    assert "this machine" in errors[0] and "has 0" in errors[0]
    assert not (tmp_path / "checkpoints").exists()  # nothing started


# ---------------------------------------------------------------- GPUs of the cluster


def test_more_gpus_than_the_cluster_has_names_the_key_and_the_most_it_can_have():
    cfg = config(gpus=2)
    assert cluster_gpu_problem(cfg, 2, "x") is None
    assert cluster_gpu_problem(config(gpus=1), 1, "x") is None  # the one-GPU box: runs
    key, message = cluster_gpu_problem(cfg, 1, "the Ray cluster at h:1")
    assert key == "cluster.gpu_per_node"
    assert "1 x gpu_per_node 2 = 2 GPU(s) requested" in message
    assert "the Ray cluster at h:1 has 1" in message and "gpu_per_node: 1 (or fewer)" in message
    cfg = config(gpus=4, nodes=2)  # 8 wanted, 6 there: 6 // 2 nodes = 3 a node
    key, message = cluster_gpu_problem(cfg, 6, "x")
    assert key == "cluster.node_num" and "gpu_per_node: 3 (or fewer)" in message
    key, message = cluster_gpu_problem(config(gpus=2), 0, "this machine")
    assert "gpu_per_node: 0 to run on CPU" in message


def test_a_joined_cluster_with_too_few_gpus_stops_before_any_actor():
    cfg = config(gpus=2)
    check_joined_cluster(cfg, 2.0, "h:6379")  # enough
    check_joined_cluster(cfg, 0.0, None)  # a local Ray: preflight checked this machine
    with pytest.raises(ConfigError) as info:
        check_joined_cluster(cfg, 1.0, "h:6379")
    assert info.value.path == "cluster.gpu_per_node" and "at h:6379 has 1" in str(info.value)
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    ("mode", "gpus", "tp", "room"),
    [
        ("both", 2, 2, 1),  # 2 GPUs, one is the trainer's: an engine can have 1
        ("both", 8, 8, 7),
        ("explore", 4, 8, 4),  # an engine lives on one node of 4 GPUs
        ("colocate", 2, 2, 1),  # one actor, one GPU
    ],
)
def test_tensor_parallel_beyond_an_engines_gpus_names_the_key(mode, gpus, tp, room):
    d = dict(MINIMAL, mode=mode, cluster={"node_num": 1, "gpu_per_node": gpus})
    d["explorer"] = {"rollout_model": {"engine_type": "hf", "tensor_parallel_size": tp}}
    if mode == "explore":
        d["buffer"] = dict(
            MINIMAL["buffer"],
            trainer_input={
                "experience_buffer": {"name": "e", "storage_type": "sql", "path": "sqlite:///e.db"}
            },
        )
    with pytest.raises(ConfigError) as info:
        load_config_from_dict(d)
    assert info.value.path == "explorer.rollout_model.tensor_parallel_size"
    assert f"{tp} GPUs per engine, but an engine can have {room}" in str(info.value)
    assert f"at most {room}" in str(info.value)


# ---------------------------------------------------------------- weights against GPU memory


def test_qwen2p5_1p5b_parameter_count_by_hand():
    # embeddings 151936 x 1536 = 233,373,696 (tied: no LM head)
    # a layer: q 1536x1536 = 2,359,296 (+1536 bias), k and v 1536x256 = 393,216 each (+256
    # bias each), o 2,359,296, MLP 3 x 1536 x 8960 = 41,287,680, 2 norms 3,072
    #   = 46,797,824; x 28 layers = 1,310,339,072; + final norm 1,536
    # total 1,543,714,304 (the model card's 1.54B)
    assert parameter_count(QWEN_1P5B) == 1_543_714_304
    assert weights_bytes(QWEN_1P5B, "auto") == 2 * 1_543_714_304  # torch_dtype bfloat16
    assert weights_bytes(QWEN_1P5B, "float32") == 4 * 1_543_714_304
    assert parameter_count({"hidden_size": 8}) is None  # a shape it cannot read


def test_parameter_count_matches_a_built_model(tmp_path):
    import json

    from transformers import AutoModelForCausalLM

    from tests.core.tiny_lm import build_tiny_model

    for tie in (True, False):
        out = build_tiny_model(tmp_path / str(tie), tie_word_embeddings=tie)
        model = AutoModelForCausalLM.from_pretrained(out)
        built = sum(p.numel() for p in model.parameters())
        assert parameter_count(json.loads((out / "config.json").read_text())) == built


def test_weights_beyond_gpu_memory_utilization_name_the_key():
    cfg = config(mode="colocate", gpus=1)
    cfg.explorer.rollout_model.engine_type = "vllm"
    # weights 3,087,428,608 B = 2.875 GiB; an 8 GiB GPU at 0.3 gives vLLM 2.40 GiB: too little
    cfg.explorer.rollout_model.gpu_memory_utilization = 0.3
    key, message = memory_fit_problem(cfg, QWEN_1P5B, 8 * GIB)
    assert key == "explorer.rollout_model.gpu_memory_utilization"
    assert "0.3 of a 8.0 GiB GPU is 2.40 GiB" in message and "2.88 GiB per GPU" in message
    assert "1.54B parameters x 2 bytes" in message
    assert "well above 0.36" in message  # 2.875 / 8 = 0.359
    # 0.5 gives 4 GiB: the weights fit
    cfg.explorer.rollout_model.gpu_memory_utilization = 0.5
    assert memory_fit_problem(cfg, QWEN_1P5B, 8 * GIB) is None
    # GPU memory unknown (a Ray cluster's), or an engine that does not read the fraction
    cfg.explorer.rollout_model.gpu_memory_utilization = 0.3
    assert memory_fit_problem(cfg, QWEN_1P5B, None) is None
    cfg.explorer.rollout_model.engine_type = "hf"
    assert memory_fit_problem(cfg, QWEN_1P5B, 8 * GIB) is None


def test_colocated_vllm_share_and_the_trainers_memory_must_fit_one_gpu():
    H200 = 140 * GIB
    cfg = config(mode="colocate", gpus=1)
    rm = cfg.explorer.rollout_model
    rm.engine_type = "vllm"
    # 1,543,714,304 parameters x 12 bytes (fp32 masters + Adam's two moments) = 17.25 GiB; the
    # default 0.9 of 140 GiB is 126 GiB: 143.25 GiB > 140
    key, message = colocate_memory_problem(cfg, QWEN_1P5B, H200)
    assert key == "explorer.rollout_model.gpu_memory_utilization"
    assert "0.9 of a 140.0 GiB GPU is 126.00 GiB for vLLM" in message
    assert "at least 17.25 GiB" in message and "1.54B parameters x 12 bytes" in message
    assert "below 0.88" in message  # (140 - 17.25) / 140 = 0.877
    assert "trainer.optimizer_offload: true" in message
    rm.gpu_memory_utilization = 0.35  # the example's setting: 49 + 17.25 GiB fit
    assert colocate_memory_problem(cfg, QWEN_1P5B, H200) is None
    # optimizer state offloaded: 4 bytes a parameter (5.75 GiB) + 126 GiB fit
    rm.gpu_memory_utilization = 0.9
    cfg.trainer.optimizer_offload = True
    assert colocate_memory_problem(cfg, QWEN_1P5B, H200) is None
    cfg.trainer.optimizer_offload = False
    # only mode colocate, only vLLM, only with the GPU's memory known
    cfg.mode = "both"
    assert colocate_memory_problem(cfg, QWEN_1P5B, H200) is None
    cfg.mode = "colocate"
    rm.engine_type = "hf"
    assert colocate_memory_problem(cfg, QWEN_1P5B, H200) is None
    rm.engine_type = "vllm"
    assert colocate_memory_problem(cfg, QWEN_1P5B, None) is None


def test_tensor_parallel_splits_the_weights_over_its_gpus():
    cfg = config(gpus=4)
    rm = cfg.explorer.rollout_model
    rm.engine_type, rm.tensor_parallel_size, rm.gpu_memory_utilization = "vllm", 2, 0.3
    # 2.875 GiB / 2 = 1.44 GiB a GPU, under 0.3 x 8 GiB = 2.4 GiB
    assert memory_fit_problem(cfg, QWEN_1P5B, 8 * GIB) is None
    rm.dtype = "float32"  # 5.75 GiB / 2 = 2.88 GiB a GPU: over 2.4
    assert memory_fit_problem(cfg, QWEN_1P5B, 8 * GIB) is not None
