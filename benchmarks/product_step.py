"""The product's GRPO step against the benchmark's, in one command.

    python3 benchmarks/product_step.py [--shape qwen2.5-1.5b] [--engines hf,vllm] [--steps 16]
                                       [--workdir DIR] [--skip-benchmark]

1. ``trinity init-demo --synthetic SHAPE`` (``rft_core.synthetic``): a random model of the
   shape and a GSM8K-shaped taskset of 128-token prompts;
2. for each engine (``hf``, and ``vllm`` when it is importable): ``trinity run --config
   examples/gpu/grpo_synthetic_1p5b.yaml`` as a user runs it (a subprocess, through Ray; the
   engine and the step count as overrides), then its monitor files read back;
3. ``benchmarks/gpu_grpo.py``'s colocated step (rollout + train + hand-off) on the same model
   directory, the same batch (32 prompts x 8 samples, 128 + 256 tokens) and the same trainer
   setting as the config (``--trainer-variant``, default the config's 256 rows a micro-batch
   with gradient checkpointing, dtype auto), in this process.

Each run's ``global_step_*`` directories are deleted once its figures are read
(``--keep-checkpoints`` keeps them; ``--convert`` first runs ``trinity convert`` on the last one
and loads the result with transformers on the GPU: seconds, size, a greedy generate). Printed, and written to
``$OUT/product_step.json`` when ``$OUT`` is set: per engine, the
product's seconds per step over its steady window (explorer steps ``--skip+1`` to the last; the
wall time between the explorer's step records, so everything the run does between two steps
counts) split as the monitor records it: ``rollout`` (``time/rollout``: generation),
``reward`` (``time/reward``), ``explore_other`` (``time/explore_step`` less those two:
advantages, the buffer write), ``train`` (``time/train_step``), ``sync`` (``time/sync_weight``,
the trainer's publish and the engine's load), ``checkpoint`` (``time/checkpoint``), ``eval``
(``time/eval``), ``waiting`` (``time/waiting``: the trainer waiting for experiences) and
``unaccounted`` (the wall time none of those cover); then the benchmark's step, the difference
and the part of each category in it. Also the run's wall time, its start-up (the command's start
to the first explorer step) and its tail (the last step to the command's end: final
checkpoint, final eval, shutdown).

On a CPU machine (``--shape smoke``) it runs the same code on the smoke shape: what
``tests/core/test_benchmark_smoke.py`` checks (the split's keys and sums, not the times).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

CONFIG = REPO / "examples" / "gpu" / "grpo_synthetic_1p5b.yaml"
CATEGORIES = (
    "rollout",
    "reward",
    "explore_other",
    "train",
    "sync",
    "checkpoint",
    "eval",
    "waiting",
)


# ---------------------------------------------------------------- the product's split


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def step_split(job_dir: Path, skip: int = 1) -> dict[str, Any]:
    """Seconds per step of the run in ``job_dir`` over explorer steps ``skip+1`` .. last, from
    its monitor files (the module docstring lists the categories). Each ``time/*`` value is
    placed at the time its work ended (its record's, or for a checkpoint the trainer's
    checkpoint event) and counted when that falls inside the window."""
    monitor = job_dir / "monitor"
    explorer = _records(monitor / "explorer_metrics.jsonl")
    trainer = _records(monitor / "trainer_metrics.jsonl")
    events = _records(monitor / "trainer_events.jsonl")
    steps = sorted(
        (r["step"], r["time"]) for r in explorer if "time/explore_step" in r and r["step"] > 0
    )
    if len(steps) < skip + 2:
        raise SystemExit(f"{job_dir}: {len(steps)} explorer steps, need at least {skip + 2}")
    (first_step, start), (last_step, end) = steps[skip], steps[-1]
    # (category, seconds, when its work ended)
    parts: list[tuple[str, float, float]] = []
    for r in explorer:
        for key, name in (
            ("time/rollout", "rollout"),
            ("time/reward", "reward"),
            ("time/sync_weight", "sync"),
            ("time/eval", "eval"),
        ):
            if key in r:
                parts.append((name, r[key], r["time"]))
        if "time/explore_step" in r:
            other = r["time/explore_step"] - r.get("time/rollout", 0.0) - r.get("time/reward", 0.0)
            parts.append(("explore_other", other, r["time"]))
    saved_at = {e["step"]: e["time"] for e in events if e.get("kind") == "checkpoint"}
    for r in trainer:
        for key, name in (
            ("time/train_step", "train"),
            ("time/sync_weight", "sync"),
            ("time/waiting", "waiting"),
        ):
            if key in r:
                parts.append((name, r[key], r["time"]))
        if "time/checkpoint" in r:  # the save after the step before, reported with this one
            parts.append(
                ("checkpoint", r["time/checkpoint"], saved_at.get(r["step"] - 1, r["time"]))
            )
    n = last_step - first_step
    wall = end - start
    totals = {c: 0.0 for c in CATEGORIES}
    for name, seconds, when in parts:
        if start < when <= end:
            totals[name] += seconds
    per_step = {c: round(totals[c] / n, 4) for c in CATEGORIES}
    per_step["unaccounted"] = round((wall - sum(totals.values())) / n, 4)
    intervals = [b[1] - a[1] for a, b in zip(steps[skip:-1], steps[skip + 1 :], strict=True)]
    return {
        "window": [first_step, last_step],
        "steps": n,
        "step_s": round(wall / n, 4),
        "median_step_s": round(statistics.median(intervals), 4),
        "split_s": per_step,
        "first_step_at": steps[0][1],
        "last_step_at": end,
    }


def run_product(
    engine: str, args: argparse.Namespace, synthetic: Path, workdir: Path
) -> dict[str, Any]:
    """``trinity run`` on the example config with ``engine``; its split and wall time."""
    name = f"product_{engine}"
    overrides = [
        f"name={name}",
        f"explorer.rollout_model.engine_type={engine}",
        f"buffer.total_steps={args.steps}",
        "continue_from_checkpoint=false",
        *args.override,
    ]
    env = {
        **os.environ,
        "RFT_SYNTHETIC_DIR": str(synthetic),
        "TRINITY_CHECKPOINT_ROOT_DIR": str(workdir / "checkpoints"),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [sys.executable, "-m", "rft_core.cli", "run", "--config", str(args.config), *overrides]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    started = time.time()
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    ended = time.time()
    result: dict[str, Any] = {
        "command": "trinity run --config " + " ".join([str(args.config), *overrides]),
        "exit_code": proc.returncode,
        "wall_s": round(ended - started, 2),
    }
    if proc.returncode != 0:
        result["stderr_tail"] = proc.stderr[-3000:]
        return result
    job_dir = workdir / "checkpoints" / "gpu" / name
    split = step_split(job_dir, args.skip)
    result.update(split)
    result["startup_s"] = round(split.pop("first_step_at") - started, 2)
    result["tail_s"] = round(ended - split.pop("last_step_at"), 2)
    result.pop("first_step_at", None), result.pop("last_step_at", None)
    result["stdout"] = proc.stdout.strip().splitlines()[-3:]
    if args.convert:
        result["convert"] = convert_and_load(job_dir, env, workdir)
    if not args.keep_checkpoints:  # ~21 GB a checkpoint at 1.5B; the device disk is 64 GiB
        import shutil

        for sub in job_dir.glob("global_step_*"):
            shutil.rmtree(sub, ignore_errors=True)
    return result


def convert_and_load(job_dir: Path, env: dict[str, str], workdir: Path) -> dict[str, Any]:
    """``trinity convert`` of the run's last checkpoint (``--force``: converted again even when
    the run wrote Hugging Face weights itself), then the result loaded with transformers on the
    GPU (the CPU on a CPU machine) and one greedy generate of 8 tokens."""
    steps = sorted(job_dir.glob("global_step_*"), key=lambda p: int(p.name.rsplit("_", 1)[1]))
    if not steps:
        return {"error": f"no global_step_* under {job_dir}"}
    last = steps[-1]
    cmd = [sys.executable, "-m", "rft_core.cli", "convert", "--checkpoint-dir", str(last)]
    started = time.perf_counter()
    proc = subprocess.run([*cmd, "--force"], cwd=workdir, env=env, capture_output=True, text=True)
    out: dict[str, Any] = {
        "command": "trinity convert --checkpoint-dir " + str(last) + " --force",
        "exit_code": proc.returncode,
        "convert_s": round(time.perf_counter() - started, 2),
    }
    if proc.returncode != 0:
        out["stderr_tail"] = proc.stderr[-2000:]
        return out
    weights = sorted(last.rglob("model*.safetensors"))
    if not weights:
        out["error"] = f"no model*.safetensors under {last}"
        return out
    hf_dir = weights[0].parent
    out["hf_dir"] = str(hf_dir)
    out["safetensors_gb"] = round(sum(w.stat().st_size for w in weights) / 1e9, 3)
    import torch
    from transformers import AutoModelForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    started = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.bfloat16).to(device)
    out["load_s"] = round(time.perf_counter() - started, 2)
    out["parameters"] = sum(p.numel() for p in model.parameters())
    ids = torch.arange(1, 17, device=device).unsqueeze(0)
    with torch.no_grad():
        gen = model.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=False)
        logits = model(ids).logits
    out["generated_tokens"] = int(gen.shape[1] - ids.shape[1])
    out["logits_finite"] = bool(torch.isfinite(logits).all())
    out["device"] = device
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


# ---------------------------------------------------------------- the benchmark's step


def run_benchmark(model_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``gpu_grpo.py``'s colocated step on ``model_dir`` (its ``train_and_step``, one trainer
    variant), after one rollout of the batch by the hf engine as in its ``rollout_speed``."""
    import gpu_grpo
    import torch

    gpu_grpo.DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
    bench = types.SimpleNamespace(
        prompts=args.prompts,
        group=args.group,
        prompt_len=args.prompt_len,
        response_len=args.response_len,
        steps=args.bench_steps,
        trainer_variants=args.trainer_variant,
        release_kv=args.release_kv,
        profile=False,
    )
    prompts = gpu_grpo.random_prompts(bench.prompts, bench.prompt_len, 2)
    sampling = gpu_grpo.SamplingParams(
        n=bench.group, temperature=1.0, max_tokens=bench.response_len, ignore_eos=True
    )
    engine = gpu_grpo.build_engine(
        "hf", str(model_dir), dtype="bfloat16", device=gpu_grpo.DEVICE, seed=1
    )
    groups = engine.generate_ids(prompts, sampling)
    del engine
    gpu_grpo.free()
    out: dict[str, Any] = {"workload": {k: v for k, v in vars(bench).items()}}
    gpu_grpo.train_and_step(model_dir, groups, bench, out)
    step = out["colocated_step"]
    return {
        "workload": out["workload"],
        "step_s": step["median_step_s"],
        "split_s": {
            "rollout": step["median_rollout_s"],
            "train": step["median_train_s"],
            "sync": step["time/sync_weight_s"],
        },
        "trainer": out["trainer"]["best_fp32_master"],
    }


def compare(product: dict[str, Any], bench: dict[str, Any]) -> dict[str, Any]:
    """The product's step less the benchmark's, and where the difference goes: each category's
    product seconds less the benchmark's (0 for what the benchmark does not do)."""
    diff = product["step_s"] - bench["step_s"]
    split = {
        name: round(product["split_s"][name] - bench["split_s"].get(name, 0.0), 4)
        for name in (*CATEGORIES, "unaccounted")
    }
    return {
        "difference_s": round(diff, 4),
        "ratio": round(product["step_s"] / bench["step_s"], 3),
        "within_10_percent": product["step_s"] <= 1.10 * bench["step_s"],
        "difference_by_category_s": split,
    }


def main() -> None:
    from rft_core.synthetic import PROMPT_TOKENS, SHAPES, build_synthetic

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="qwen2.5-1.5b", choices=sorted(SHAPES))
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument(
        "--engines", default=None, help="comma-separated (default: hf, and vllm when importable)"
    )
    parser.add_argument("--steps", type=int, default=16, help="explorer steps of each run")
    parser.add_argument("--skip", type=int, default=1, help="first steps left out (warm-up)")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temp dir")
    parser.add_argument("--skip-benchmark", action="store_true")
    parser.add_argument(
        "--keep-checkpoints", action="store_true", help="keep each run's global_step_* dirs"
    )
    parser.add_argument(
        "--convert",
        action="store_true",
        help="trinity convert each run's last checkpoint and load it with transformers",
    )
    parser.add_argument("--bench-steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=PROMPT_TOKENS)
    parser.add_argument("--response-len", type=int, default=256)
    parser.add_argument("--trainer-variant", default="256:1:auto", help="gpu_grpo.py's form")
    parser.add_argument(
        "--release-kv", action="store_true", help="benchmark frees the engine's KV while training"
    )
    parser.add_argument(
        "--override", action="append", default=[], help="key=value for the product runs"
    )
    args = parser.parse_args()
    engines = (
        args.engines.split(",")
        if args.engines
        else ["hf", *(["vllm"] if importlib.util.find_spec("vllm") else [])]
    )
    import tempfile

    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="rft_product_step_"))).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    synthetic = workdir / "synthetic"
    t0 = time.perf_counter()
    paths = build_synthetic(synthetic, args.shape, prompt_tokens=args.prompt_len)
    out: dict[str, Any] = {
        "shape": args.shape,
        "workdir": str(workdir),
        "build_synthetic_s": round(time.perf_counter() - t0, 1),
        "product": {},
    }

    def report() -> None:
        text = json.dumps(out, indent=1)
        if os.environ.get("OUT"):
            Path(os.environ["OUT"], "product_step.json").write_text(text)

    for engine in engines:
        out["product"][engine] = run_product(engine, args, synthetic, workdir)
        report()
    if not args.skip_benchmark:
        out["benchmark"] = run_benchmark(paths.model_dir, args)
        out["comparison"] = {
            engine: compare(result, out["benchmark"])
            for engine, result in out["product"].items()
            if "step_s" in result
        }
    report()
    print(json.dumps(out, indent=1))
    for engine, result in out["product"].items():
        if "step_s" not in result:
            print(f"{engine}: trinity run exited {result['exit_code']}")
            continue
        split = ", ".join(f"{k} {v:.3f}" for k, v in result["split_s"].items())
        print(f"{engine}: product {result['step_s']:.3f} s/step ({split})")
        if "comparison" in out and engine in out["comparison"]:
            c = out["comparison"][engine]
            print(
                f"{engine}: benchmark {out['benchmark']['step_s']:.3f} s/step; difference "
                f"{c['difference_s']:+.3f} s ({c['ratio']:.2f}x)"
            )
    if any("step_s" not in r for r in out["product"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
