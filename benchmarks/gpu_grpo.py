"""GRPO on one GPU, measured against plain transformers and TRL in the same call.

    python3 benchmarks/gpu_grpo.py [--prompts 32 --group 8 --prompt-len 128 --response-len 256
                                    --steps 3 --skip-trl --skip-generate]

The workload of issue 12: a model of Qwen2.5-1.5B-Instruct's architecture (its published
``config.json`` values below) with random weights (nothing can be downloaded on the device
machine), a word-level tokenizer over its 151,936 ids, ``prompts`` random prompts of
``prompt-len`` tokens, ``group`` samples each, responses forced to ``response-len`` tokens
(``ignore_eos``), GRPO (PPO-clip, k2 KL to a reference model at 0.001, AdamW lr 1e-6).

Printed, in one JSON object (also written to ``$OUT/gpu_grpo.json``):

* checks (fp32 copies of the model, greedy): the hf engine's generic path, its static-cache path
  run eagerly and its CUDA-graph path give the same tokens; seeded sampling gives the same
  tokens eagerly and through the graphs;
* rollout tokens/s (bf16, best of ``steps`` after a warm-up call): the hf engine (static cache +
  CUDA graphs), the same eagerly, the generic path, ``model.generate`` and ``model.generate``
  with ``cache_implementation="static"``, all at the same batch (prompts × group rows);
* trainer: ``PolicyUpdater.train_step`` on the rollout's experiences (``dtype: auto``: bf16
  parameters with fp32 master weights), tokens/s and MFU = 6 · N · tokens / time / 790e12 (N: the model's parameters; the
  H200's measured dense bf16 rate), peak memory;
* the hand-off from the trainer to the engine on the one GPU (what colocate's sync costs), the
  whole step (rollout + train + hand-off) and the peak GPU memory of the step;
* TRL ``GRPOTrainer`` on the same model, batch and lengths (bf16 autocast on fp32 weights, its
  reference model at beta 0.001, ``min_new_tokens`` forcing the full length), seconds per
  optimizer step, and the ratios.

Needs torch, transformers, tokenizers, safetensors (and trl + datasets for the TRL side); no
Ray, OmegaConf or network.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from rft_core.experience import Experience  # noqa: E402
from rft_core.rollout import SamplingParams, build_engine  # noqa: E402
from rft_core.synthetic import QWEN25_1P5B, SMOKE, write_model  # noqa: E402

PEAK_BF16_FLOPS = 790e12  # H200 dense bf16, measured on the device machine (KINDS.md)
# the shapes live in rft_core.synthetic (Qwen2.5-1.5B-Instruct's config.json; its smoke size)
QWEN25_15B, SMOKE_SHAPE = QWEN25_1P5B, SMOKE


def build_model(root: Path, seed: int, tiny: bool = False) -> Path:
    """A random Qwen2.5-1.5B-shaped model (bf16 safetensors) and a word-level tokenizer whose
    token ``i`` is the word ``t<i>``, so any id sequence decodes and re-encodes exactly
    (``rft_core.synthetic.write_model``, what ``trinity init-demo --synthetic`` writes)."""
    path = root / ("tiny_random" if tiny else "qwen25_15b_random")
    if (path / "config.json").exists():
        return path
    # a smoke run's size (the CPU check of this script), Qwen2.5's vocabulary kept
    write_model(path, SMOKE_SHAPE if tiny else QWEN25_15B, seed, DEVICE, words=True)
    free()
    return path


DEVICE = "cuda"


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def timed(fn):
    sync()
    start = time.perf_counter()
    result = fn()
    sync()
    return time.perf_counter() - start, result


def peak_memory() -> float:
    return gib(torch.cuda.max_memory_allocated()) if DEVICE == "cuda" else 0.0


def reset_peak() -> None:
    if DEVICE == "cuda":
        torch.cuda.reset_peak_memory_stats()


def free() -> None:
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def gib(n: float) -> float:
    return round(n / 2**30, 2)


def random_prompts(n: int, length: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(200, 150000, (n, length), generator=g).tolist()


def checks(model_dir: Path, out: dict) -> None:
    """Greedy tokens of the three decoding paths (fp32), and seeded sampling eager vs graphs."""
    prompts = random_prompts(4, 40, 1)
    greedy = SamplingParams(n=2, temperature=0.0, max_tokens=48)
    sampled = SamplingParams(n=2, temperature=1.0, top_p=0.95, top_k=50, max_tokens=48, seed=7)
    results = {}
    for name, kwargs in {
        "generic": {"static_cache": False},
        "static_eager": {"static_cache": True, "enforce_eager": True},
        "static_graphs": {"static_cache": True},
    }.items():
        engine = build_engine("hf", str(model_dir), dtype="float32", device=DEVICE, **kwargs)
        results[name] = {
            "greedy": [
                [g.response_ids for g in grp] for grp in engine.generate_ids(prompts, greedy)
            ],
            "greedy_logprobs": [
                g.logprobs for grp in engine.generate_ids(prompts, greedy) for g in grp
            ],
            "sampled": [
                [g.response_ids for g in grp] for grp in engine.generate_ids(prompts, sampled)
            ],
        }
        del engine
        free()
    base = results["generic"]
    out["checks"] = {
        "greedy_tokens_equal_static_eager": results["static_eager"]["greedy"] == base["greedy"],
        "greedy_tokens_equal_static_graphs": results["static_graphs"]["greedy"] == base["greedy"],
        "greedy_logprob_max_abs_diff_graphs_vs_generic": max(
            abs(a - b)
            for x, y in zip(
                results["static_graphs"]["greedy_logprobs"], base["greedy_logprobs"], strict=True
            )
            for a, b in zip(x, y, strict=True)
        ),
        "sampled_tokens_equal_graphs_vs_eager": results["static_graphs"]["sampled"]
        == results["static_eager"]["sampled"],
    }


def rollout_speed(model_dir: Path, args, out: dict) -> list[list]:
    """Tokens/s of each way to generate the step's rows; returns the engine's groups."""
    prompts = random_prompts(args.prompts, args.prompt_len, 2)
    rows = args.prompts * args.group
    tokens = rows * args.response_len
    params = SamplingParams(
        n=args.group, temperature=1.0, max_tokens=args.response_len, ignore_eos=True
    )
    speeds, groups = {}, None
    for name, kwargs, runs in (
        ("hf_engine_static_cuda_graphs", {"static_cache": True}, args.steps),
        ("hf_engine_static_eager", {"static_cache": True, "enforce_eager": True}, 1),
        ("hf_engine_generic", {"static_cache": False}, 1),
    ):
        engine = build_engine(
            "hf", str(model_dir), dtype="bfloat16", device=DEVICE, seed=1, **kwargs
        )
        call = functools.partial(engine.generate_ids, prompts, params)
        warm, _ = timed(call)
        times = []
        for _ in range(runs):
            seconds, result = timed(call)
            times.append(seconds)
        assert all(len(g.response_ids) == args.response_len for grp in result for g in grp)
        speeds[name] = {
            "tokens_per_s": round(tokens / min(times), 1),
            "seconds": [round(t, 3) for t in times],
            "first_call_s": round(warm, 3),
        }
        if name == "hf_engine_static_cuda_graphs":
            groups = result
            if args.profile:  # the kernels inside the replayed graphs
                speeds[name]["profile_top_kernels"] = profile_step(call)
            speeds[name]["graphs_captured"] = engine.static_decoder.graph_captures
        del engine
        free()
    if not args.skip_generate:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to(DEVICE)
        ids = torch.tensor([p for p in prompts for _ in range(args.group)], device=DEVICE)
        for name, extra in (
            ("model_generate", {}),
            ("model_generate_static_cache", {"cache_implementation": "static"}),
        ):

            def call(extra=extra):
                return model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    do_sample=True,
                    temperature=1.0,
                    top_k=0,
                    max_new_tokens=args.response_len,
                    min_new_tokens=args.response_len,
                    pad_token_id=151643,
                    **extra,
                )

            warm, _ = timed(call)
            times = [timed(call)[0] for _ in range(max(1, args.steps - 1))]
            speeds[name] = {
                "tokens_per_s": round(tokens / min(times), 1),
                "seconds": [round(t, 3) for t in times],
                "first_call_s": round(warm, 3),
            }
        del model
        free()
    best = speeds["hf_engine_static_cuda_graphs"]["tokens_per_s"]
    for figures in speeds.values():
        figures["engine_speedup"] = round(best / figures["tokens_per_s"], 2)
    out["rollout"] = {"rows": rows, "tokens_per_call": tokens, **speeds}
    return groups


def experiences_of(groups: list[list], seed: int) -> list[Experience]:
    """The rollout as GRPO experiences: random rewards, group-normalized advantages."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for k, group in enumerate(groups):
        rewards = torch.rand(len(group), generator=g)
        adv = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
        for gen, r, a in zip(group, rewards.tolist(), adv.tolist(), strict=True):
            out.append(
                Experience(
                    prompt_ids=gen.prompt_ids,
                    response_ids=gen.response_ids,
                    logprobs=gen.logprobs,
                    reward=r,
                    advantage=a,
                    group_id=f"g{k}",
                )
            )
    return out


def train_and_step(model_dir: Path, groups: list[list], args, out: dict) -> None:
    """Trainer tokens/s and MFU, the hand-off to the engine, the whole colocated step."""
    from rft_core.trainer.fusion import DEFAULT_SCOPE
    from rft_core.trainer.policy import PolicyUpdater

    experiences = experiences_of(groups, 3)
    tokens = sum(len(e.prompt_ids) + len(e.response_ids) for e in experiences)
    algo = types.SimpleNamespace(algorithm_type="grpo", optimizer=types.SimpleNamespace(lr=1e-6))

    def trainer(spec: str) -> PolicyUpdater:
        micro, checkpointing, dtype, *rest = spec.split(":")
        packing, fusion = (rest + [None, None])[:2]
        return PolicyUpdater(
            str(model_dir),
            algo,
            device=DEVICE,
            dtype=dtype,
            micro_batch_size=int(micro),
            gradient_checkpointing=checkpointing == "1",
            loss_horizon=args.response_len,
            use_remove_padding=(packing == "1") if packing else None,
            use_torch_compile=(fusion != "0") if fusion else None,
            compile_scope=fusion if fusion not in (None, "0", "1") else DEFAULT_SCOPE,
        )

    # each variant "rows per micro-batch:gradient checkpointing 0/1:dtype[:packed 0/1[:fusion]]"
    # ("auto": bf16 parameters with fp32 master weights; "bfloat16": bf16 weights and optimizer,
    # for scale; packed: trainer.use_remove_padding; fusion: trainer.use_torch_compile, "0"
    # eager or a scope of rft_core.trainer.fusion, "parts" or "layers"; left out: defaults)
    variants, best_variant = [], None
    for spec in args.trainer_variants.split(","):
        dtype = spec.split(":")[2]
        reset_peak()
        policy = trainer(spec)
        params = sum(p.numel() for p in policy.model.parameters())
        step = functools.partial(policy.train_step, experiences)
        try:
            warmup, _ = timed(step)  # compiles, when the variant compiles
            times = [timed(step)[0] for _ in range(args.steps)]
        except torch.OutOfMemoryError:
            variants.append({"variant": spec, "error": "out of memory"})
            del policy, step
            free()
            continue
        best = min(times)
        figures = {
            "variant": spec,
            "warmup_s": round(warmup, 1),
            "seconds": [round(t, 3) for t in times],
            "tokens_per_s": round(tokens / best, 1),
            "mfu": round(6 * params * tokens / best / PEAK_BF16_FLOPS, 3),
            "peak_memory_gib": peak_memory(),
        }
        variants.append(figures)
        print(json.dumps(figures), file=sys.stderr, flush=True)  # progress, before the report
        if dtype == "auto" and (
            best_variant is None or figures["tokens_per_s"] > best_variant["tokens_per_s"]
        ):
            best_variant = figures
        del policy, step
        free()
    out["trainer"] = {
        "parameters": params,
        "tokens_per_step": tokens,
        "mfu_formula": "6 * parameters * tokens / seconds / 790e12 (the reference model's "
        "forward, 2 * parameters * tokens more, is not counted)",
        "variants": variants,
        "best_fp32_master": best_variant,
    }
    policy = trainer(best_variant["variant"])
    if args.profile:
        out["trainer"]["profile_top_kernels"] = profile_step(
            functools.partial(policy.train_step, experiences)
        )
    # the colocated step: engine and trainer on the one GPU, weights handed over in memory
    engine = build_engine("hf", str(model_dir), dtype="bfloat16", device=DEVICE, seed=5)
    prompts = [list(g[0].prompt_ids) for g in groups]
    sampling = SamplingParams(
        n=args.group, temperature=1.0, max_tokens=args.response_len, ignore_eos=True
    )
    engine.generate_ids(prompts, sampling)  # graphs captured
    steps = []
    reset_peak()
    for version in range(1, args.steps + 1):
        rollout_s, new_groups = timed(functools.partial(engine.generate_ids, prompts, sampling))
        if args.release_kv:
            engine.release_memory()
        batch = experiences_of(new_groups, version)
        train_s, _ = timed(functools.partial(policy.train_step, batch))
        # in one process the trainer's parameters go straight into the engine's (GPU to GPU)
        weights = {k: v.detach() for k, v in policy.model.state_dict().items()}
        sync_s, _ = timed(functools.partial(engine.load_weights, weights, version))
        steps.append({"rollout_s": rollout_s, "train_s": train_s, "sync_weight_s": sync_s})
    whole = [s["rollout_s"] + s["train_s"] + s["sync_weight_s"] for s in steps]
    out["colocated_step"] = {
        "median_step_s": round(statistics.median(whole), 3),
        "median_rollout_s": round(statistics.median(s["rollout_s"] for s in steps), 3),
        "median_train_s": round(statistics.median(s["train_s"] for s in steps), 3),
        "time/sync_weight_s": round(statistics.median(s["sync_weight_s"] for s in steps), 4),
        "peak_memory_gib": peak_memory(),
        "engine_kv_released_while_training": args.release_kv,
    }
    del engine, policy
    free()


def profile_step(step) -> list[dict]:
    """One call (a trainer step, a rollout) under torch.profiler: the 25 kernels (by name) with
    the most GPU time."""
    from torch.profiler import ProfilerActivity, profile

    cuda = DEVICE == "cuda"
    step()  # warm
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        step()
        sync()

    def spent(e) -> float:
        return e.device_time_total if cuda else e.self_cpu_time_total

    rows = sorted(prof.key_averages(), key=spent, reverse=True)
    total = sum(spent(e) for e in rows) or 1.0
    return [
        {
            "kernel": e.key[:90],
            "ms": round(spent(e) / 1000, 1),
            "share": round(spent(e) / total, 3),
            "calls": e.count,
        }  # fmt: skip
        for e in rows[:25]
    ]


def run_trl(model_dir: Path, args, out: dict) -> None:
    from datasets import Dataset
    from transformers import PreTrainedTokenizerFast, PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    prompts = random_prompts(args.prompts, args.prompt_len, 2)
    texts = [" ".join(f"t{i}" for i in p) for p in prompts]
    times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kwargs):
            sync()
            self.start = time.perf_counter()

        def on_step_end(self, a, state, control, **kwargs):
            sync()
            times.append(time.perf_counter() - self.start)

    def reward(completions, **_):
        return [float(len(c) % 7) for c in completions]

    rows = args.prompts * args.group
    micro = min(args.micro_batch, rows)
    steps = args.steps + 1
    with tempfile.TemporaryDirectory(prefix="trl_gpu_") as out_dir:
        config = GRPOConfig(
            output_dir=out_dir,
            per_device_train_batch_size=micro,
            gradient_accumulation_steps=rows // micro,
            num_generations=args.group,
            generation_batch_size=rows,
            max_completion_length=args.response_len,
            generation_kwargs={"min_new_tokens": args.response_len},
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            num_iterations=1,
            beta=0.001,
            loss_type="dapo",
            learning_rate=1e-6,
            lr_scheduler_type="constant",
            max_steps=steps,
            bf16=DEVICE == "cuda",
            use_cpu=DEVICE == "cpu",
            gradient_checkpointing=args.gradient_checkpointing,
            shuffle_dataset=False,
            save_strategy="no",
            report_to=[],
            logging_steps=1,
            disable_tqdm=True,
            model_init_kwargs={"dtype": torch.float32},
        )
        dataset = Dataset.from_dict({"prompt": texts * steps})
        trainer = GRPOTrainer(
            model=str(model_dir),
            reward_funcs=[reward],
            args=config,
            # the word-level tokenizer as saved (AutoTokenizer would rebuild Qwen2's BPE one)
            processing_class=PreTrainedTokenizerFast.from_pretrained(model_dir),
            train_dataset=dataset,
            callbacks=[StepTimer()],
        )
        trainer.remove_callback(PrinterCallback)
        reset_peak()
        trainer.train()
    lengths = [h.get("completions/mean_length") for h in trainer.state.log_history]
    measured = times[1:]
    out["trl"] = {
        "version": __import__("trl").__version__,
        "seconds_per_step": [round(t, 3) for t in measured],
        "median_step_s": round(statistics.median(measured), 3),
        "mean_completion_length": [x for x in lengths if x is not None],
        "peak_memory_gib": peak_memory(),
        "micro_batch_size": micro,
        "gradient_checkpointing": args.gradient_checkpointing,
    }
    if "colocated_step" in out:
        out["ratio_trl_step_over_rft_step"] = round(
            out["trl"]["median_step_s"] / out["colocated_step"]["median_step_s"], 2
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--response-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3, help="measured steps after a warm-up")
    parser.add_argument("--micro-batch", type=int, default=32, help="TRL's rows per forward")
    parser.add_argument("--gradient-checkpointing", action="store_true", help="TRL's setting")
    parser.add_argument(
        "--trainer-variants",
        default="32:0:auto,64:0:auto,128:0:auto,64:1:auto,64:0:bfloat16",
        help="rft_core trainer settings measured, each micro-batch rows:checkpointing:dtype",
    )
    parser.add_argument(
        "--release-kv", action="store_true", help="colocate: free the engine's KV while training"
    )
    parser.add_argument("--tiny", action="store_true", help="a smoke run's model (and CPU)")
    parser.add_argument("--profile", action="store_true", help="profile one trainer step")
    parser.add_argument("--skip-checks", action="store_true")
    parser.add_argument("--skip-generate", action="store_true")
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--only", choices=["rollout", "trainer", "trl"], default=None)
    args = parser.parse_args()
    global DEVICE
    DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
    out: dict = {
        "device": torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "workload": {k: v for k, v in vars(args).items() if not k.startswith("skip")},
    }
    root = Path(tempfile.gettempdir()) / "rft_gpu_grpo"
    root.mkdir(exist_ok=True)
    model_dir = build_model(root, seed=0, tiny=args.tiny)

    def report() -> None:
        text = json.dumps(out, indent=1)
        print(text, flush=True)
        if os.environ.get("OUT"):
            Path(os.environ["OUT"], "gpu_grpo.json").write_text(text)

    try:
        if not args.skip_checks and args.only is None:
            checks(model_dir, out)
            report()
        if args.only in (None, "rollout", "trainer"):
            groups = rollout_speed(model_dir, args, out)
            report()
            if args.only != "rollout":
                train_and_step(model_dir, groups, args, out)
                report()
        if not args.skip_trl and args.only in (None, "trl"):
            run_trl(model_dir, args, out)
    finally:
        report()


if __name__ == "__main__":
    main()
