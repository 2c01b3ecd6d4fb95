"""Writers of the checkpoint layouts that ``trinity convert`` reads, independent of the reader:
a reference Megatron TP/PP sharding of a Hugging Face Qwen2 state dict, real FSDP1/FSDP2
shard files from gloo processes, and helpers that compare converted models."""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import torch
from checkpoint_fixtures import logits_of
from transformers import AutoModelForCausalLM

from rft_core.checkpoint.store import save_checkpoint

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / ".venv" / "bin" / "python"
TRINITY = REPO / ".venv" / "bin" / "trinity"


def save_job_step(job: Path, step: int, model, tokenizer, world_size: int = 1) -> Path:
    """A trainer-style checkpoint without HF weights (what convert exists for)."""
    return save_checkpoint(
        job,
        step,
        state_dict=model.state_dict(),
        optimizer_state=None,
        extra_state={},
        hf_config=model.config,
        tokenizer=tokenizer,
        save_hf=False,
        world_size=world_size,
    )


def hf_dir(step_path: Path) -> Path:
    return step_path / "actor" / "huggingface"


def assert_same_logits(converted: Path, model, tokenizer, atol: float = 1e-5) -> None:
    reloaded = AutoModelForCausalLM.from_pretrained(converted)
    want, got = logits_of(model, tokenizer), logits_of(reloaded, tokenizer)
    assert torch.allclose(got.float(), want.float(), atol=atol), (got - want).abs().max()


def tree_fingerprint(root: Path) -> dict[str, tuple[int, str]]:
    """mtime_ns and sha256 of every file under root."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(root))] = (
                p.stat().st_mtime_ns,
                hashlib.sha256(p.read_bytes()).hexdigest(),
            )
    return out


def write_megatron(actor: Path, model, tp: int, pp: int = 1, vocab_multiple: int = 128) -> None:
    """Reference Megatron-core sharding (TE layer spec names) of a Qwen2 model, as
    rft_core/checkpoint/formats/megatron.py documents it; written from the HF side."""
    cfg = model.config
    sd = model.state_dict()
    n_heads, n_groups = cfg.num_attention_heads, cfg.num_key_value_heads
    d, hidden = cfg.hidden_size // n_heads, cfg.hidden_size
    per_group = n_heads // n_groups
    padded_vocab = -(-cfg.vocab_size // (vocab_multiple * tp)) * vocab_multiple * tp

    def pad_vocab(t):
        extra = torch.randn(padded_vocab - t.shape[0], *t.shape[1:])  # padding rows must be dropped
        return torch.cat([t, extra])

    stage_layers = [list(x) for x in torch.arange(cfg.num_hidden_layers).tensor_split(pp) if len(x)]
    for t in range(tp):
        for p in range(pp):
            out = {}
            if p == 0:
                out["embedding.word_embeddings.weight"] = (
                    pad_vocab(sd["model.embed_tokens.weight"]).chunk(tp)[t].clone()
                )
            for j, i in enumerate(int(x) for x in stage_layers[p]):
                hf, mg = f"model.layers.{i}.", f"decoder.layers.{j}."
                for kind in ("weight", "bias"):
                    q = sd[f"{hf}self_attn.q_proj.{kind}"].reshape(n_groups, per_group * d, -1)
                    k = sd[f"{hf}self_attn.k_proj.{kind}"].reshape(n_groups, d, -1)
                    v = sd[f"{hf}self_attn.v_proj.{kind}"].reshape(n_groups, d, -1)
                    qkv = torch.cat([q, k, v], dim=1).chunk(tp, dim=0)[t]
                    shape = (-1, hidden) if kind == "weight" else (-1,)
                    out[f"{mg}self_attention.linear_qkv.{kind}"] = qkv.reshape(shape).clone()
                out[f"{mg}self_attention.linear_qkv.layer_norm_weight"] = sd[
                    f"{hf}input_layernorm.weight"
                ].clone()
                out[f"{mg}self_attention.linear_proj.weight"] = (
                    sd[f"{hf}self_attn.o_proj.weight"].chunk(tp, dim=1)[t].clone()
                )
                gate = sd[f"{hf}mlp.gate_proj.weight"].chunk(tp)[t]
                up = sd[f"{hf}mlp.up_proj.weight"].chunk(tp)[t]
                out[f"{mg}mlp.linear_fc1.weight"] = torch.cat([gate, up]).clone()
                out[f"{mg}mlp.linear_fc1.layer_norm_weight"] = sd[
                    f"{hf}post_attention_layernorm.weight"
                ].clone()
                out[f"{mg}mlp.linear_fc2.weight"] = (
                    sd[f"{hf}mlp.down_proj.weight"].chunk(tp, dim=1)[t].clone()
                )
                out[f"{mg}self_attention.core_attention._extra_state"] = None
            if p == pp - 1:
                out["decoder.final_layernorm.weight"] = sd["model.norm.weight"].clone()
                if not cfg.tie_word_embeddings:
                    out["output_layer.weight"] = (
                        pad_vocab(sd["lm_head.weight"]).chunk(tp)[t].clone()
                    )
            name = f"mp_rank_{t:02d}" if pp == 1 else f"mp_rank_{t:02d}_{p:03d}"
            (actor / name).mkdir(parents=True)
            args = argparse.Namespace(
                tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp
            )
            torch.save(
                {"model": out, "args": args, "checkpoint_version": 3.0},
                actor / name / "model_optim_rng.pt",
            )


FSDP_WRITER = r"""
import sys, torch, torch.distributed as dist
sys.path.insert(0, {tests!r})
from checkpoint_fixtures import build_model, build_tokenizer, tiny_config
rank, ws, out, kind, larger = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5] == "1"
dist.init_process_group("gloo", init_method=f"file://{{out}}/.store", rank=rank, world_size=ws)
model = build_model(tiny_config(len(build_tokenizer()), larger=larger), seed=int(sys.argv[6]))
if kind == "fsdp2":  # verl/Trinity FSDP2: fully_shard + sharded get_model_state_dict -> DTensor
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (ws,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=False, cpu_offload=True))
else:  # verl FSDP1: SHARDED_STATE_DICT -> ShardedTensor
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType
    model = FSDP(model, device_id=torch.device("cpu"), use_orig_params=True)
    with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
        sd = model.state_dict()
torch.save(sd, f"{{out}}/model_world_size_{{ws}}_rank_{{rank}}.pt")
dist.barrier()
dist.destroy_process_group()
"""


def write_real_fsdp_shards(
    actor: Path, kind: str, world_size: int, larger: bool, seed: int
) -> None:
    """Run ``world_size`` gloo processes that shard the fixture model with real FSDP and save
    each rank's state dict the way verl's checkpoint manager does. ``seed`` as in build_model."""
    actor.mkdir(parents=True, exist_ok=True)
    script = actor.parent / "fsdp_writer.py"
    script.write_text(FSDP_WRITER.format(tests=str(Path(__file__).parent)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [
                str(PYTHON),
                str(script),
                str(r),
                str(world_size),
                str(actor),
                kind,
                "1" if larger else "0",
                str(seed),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world_size)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    (actor / ".store").unlink(missing_ok=True)
    script.unlink()


def run_trinity(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(TRINITY), "convert", *args], capture_output=True, text=True, timeout=300, cwd=REPO
    )


def python_env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
