"""Throughput of ``trinity convert`` against ``cp`` of the same bytes on the same disk.

    .venv/bin/python benchmarks/convert.py [--gb 1.0] [--world-size 4] [--dir /tmp] [--repeat 2]

Builds a synthetic Qwen2-architecture checkpoint of about ``--gb`` GB (fp32, random weights,
written by ``rft_core.checkpoint.store.save_checkpoint`` at ``--world-size``) in a temporary
directory, converts it to ``huggingface/model.safetensors`` with ``rft_core.convert`` and
copies the same shard files with ``cp``; both read warm page cache and neither fsyncs, so the
ratio compares the converter's work (merge shards, write safetensors) with a plain copy.
A last run with ``--dtype bf16`` shows the cast path (tensors are read and converted).
Prints the best of ``--repeat`` interleaved runs of each.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rft_core.checkpoint.store import save_checkpoint
from rft_core.convert import convert_checkpoints


def synthetic_config(gb: float) -> Qwen2Config:
    """Qwen2 shapes (hidden 1024, GQA 16/4, untied 32k vocab) with as many layers as reach
    ``gb`` GB in fp32 (~11.3M parameters per layer, 65.5M in the embeddings)."""
    per_layer, embeddings = 11_337_728, 2 * 32_000 * 1024
    layers = max(1, round((gb * 1e9 / 4 - embeddings) / per_layer))
    return Qwen2Config(
        vocab_size=32_000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=4,
        tie_word_embeddings=False,
        dtype="float32",
    )


def build_job(job: Path, cfg: Qwen2Config, world_size: int) -> int:
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in Qwen2ForCausalLM(cfg).state_dict().items()}
    gen = torch.Generator().manual_seed(0)
    state_dict = {k: torch.rand(s, generator=gen) - 0.5 for k, s in shapes.items()}
    save_checkpoint(
        job,
        1,
        state_dict=state_dict,
        optimizer_state=None,
        extra_state={},
        hf_config=cfg,
        tokenizer=None,
        save_hf=False,
        world_size=world_size,
    )
    return sum(t.numel() * t.element_size() for t in state_dict.values())


def time_convert(job: Path, actor: Path, dtype: str = "auto") -> float:
    # start from an unconverted step, as cp starts from an empty directory
    for old in (actor / "huggingface").glob("model*.safetensors*"):
        old.unlink()
    start = time.perf_counter()
    report = convert_checkpoints(job, dtype=dtype)
    elapsed = time.perf_counter() - start
    if not report.ok or not report.converted:
        sys.exit(f"conversion failed:\n{report.summary()}")
    return elapsed


def time_cp(actor: Path, dest: Path) -> float:
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir()
    shards = sorted(str(p) for p in actor.glob("model_world_size_*_rank_*.pt"))
    start = time.perf_counter()
    subprocess.run(["cp", *shards, str(dest)], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--dir", default=None, help="where the temporary checkpoint goes")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="rft-convert-bench-", dir=args.dir))
    try:
        job = root / "job"
        cfg = synthetic_config(args.gb)
        t0 = time.perf_counter()
        nbytes = build_job(job, cfg, args.world_size)
        actor = job / "global_step_1" / "actor"
        print(
            f"checkpoint: {nbytes / 1e9:.2f} GB fp32, {cfg.num_hidden_layers} layers, "
            f"world size {args.world_size}, on {root} (built in {time.perf_counter() - t0:.1f} s)"
        )
        convert_runs, cp_runs = [], []
        for _ in range(args.repeat):  # interleaved, so load from other processes hits both
            convert_runs.append(time_convert(job, actor))
            cp_runs.append(time_cp(actor, root / "cp"))
        convert_s, cp_s = min(convert_runs), min(cp_runs)
        out = actor / "huggingface" / "model.safetensors"
        print(
            f"runs (s): convert {[round(x, 2) for x in convert_runs]}, cp {[round(x, 2) for x in cp_runs]}"
        )
        print(
            f"convert: {convert_s:.2f} s  {nbytes / convert_s / 1e9:.2f} GB/s  -> {out.name} "
            f"{out.stat().st_size / 1e9:.2f} GB"
        )
        print(f"cp:      {cp_s:.2f} s  {nbytes / cp_s / 1e9:.2f} GB/s")
        print(f"ratio convert/cp throughput: {cp_s / convert_s:.2f}x  (goal >= 0.5x)")
        bf16_s = time_convert(job, actor, dtype="bf16")
        print(
            f"with --dtype bf16 (cast, no byte copy path): {bf16_s:.2f} s, "
            f"{nbytes / bf16_s / 1e9:.2f} GB/s of fp32 input"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
