"""The vLLM rollout engine against ``vllm.LLM.generate`` on the same call, and weight sync into
vLLM, in one command (issue 21, item 4).

    python3 benchmarks/vllm_engine.py [--prompts 32 --samples 8 --prompt-len 128
                                       --response-len 256 --repeats 3 --bucket-mb 256]
    python3 benchmarks/vllm_engine.py --smoke     # tiny sizes (the CPU test runs it on the fake)

The workload: ``benchmarks/gpu_grpo.py``'s random Qwen2.5-1.5B-shaped model (bf16) and its
word-level tokenizer, ``prompts`` random prompts of ``prompt-len`` ids, ``samples`` samples each,
temperature 1, responses forced to ``response-len`` tokens (``ignore_eos``).

One ``vllm.LLM`` (built by the adapter, ``build_engine("vllm", ...)``, colocated settings:
``enable_sleep_mode``, ``gpu_memory_utilization`` 0.5 so a trainer copy fits beside it) serves
both sides, alternated, best of ``repeats`` after one warm-up call each:

* ``direct``: ``llm.generate(TokensPrompt..., SamplingParams(n, temperature=1, max_tokens,
  ignore_eos, logprobs=0))`` with vLLM's defaults otherwise (its detokenizer on), as issue 21
  measured it; ``direct_no_detok``: the same with ``detokenize=False``;
* ``adapter``: ``engine.generate_ids(prompts, SamplingParams(n, ...))``, which returns our
  ``Generation`` objects (token ids, per-token log-probs, text from one ``batch_decode``).

Generated tokens per second for each and ``adapter / direct`` (goal >= 0.95). Then weight sync:
the model's weights as a trainer holds them (a bf16 copy on the same GPU), loaded into vLLM with
``engine.load_weights`` (CUDA IPC buckets of ``--bucket-mb``; the path the colocate loop uses),
best of ``repeats``, awake and after ``release_memory`` (vLLM asleep at level 1, so the load
includes waking the weights): seconds, the figure the explorer logs as ``time/sync_weight``
(goal <= 0.2 s). Checks that the weights arrive: reloading the checkpoint's weights keeps vLLM's
greedy tokens, loading zeros changes them, loading the originals again restores them (the fake
vLLM of the smoke test does not compute with its weights: these three mean nothing there).

Printed as lines and one JSON object, also written to ``$OUT/vllm_engine.json`` when ``OUT`` is
set (or ``--json PATH``). Needs vLLM (0.26.x), torch with CUDA, transformers; on a machine
without CUDA it runs only against the fake vLLM of ``tests/core/fake_vllm`` (the smoke test).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gpu_grpo  # noqa: E402  (the same random model and prompts)

from rft_core.rollout import SamplingParams, build_engine  # noqa: E402

CUDA = torch.cuda.is_available()


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def timed(fn) -> tuple[float, object]:
    sync()
    start = time.perf_counter()
    result = fn()
    sync()
    return time.perf_counter() - start, result


def generated_tokens(outputs) -> int:
    return sum(len(c.token_ids) for request in outputs for c in request.outputs)


def rollout(engine, prompts: list[list[int]], args, out: dict) -> None:
    """direct / direct_no_detok / adapter, alternated; best of ``repeats`` after a warm-up."""
    import vllm
    from vllm.inputs import TokensPrompt

    llm = engine.llm
    token_prompts = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]

    def direct_params(detokenize: bool):
        kwargs = dict(n=args.samples, temperature=1.0, max_tokens=args.response_len)
        kwargs.update(ignore_eos=True, logprobs=0, seed=args.seed)
        if not detokenize:
            kwargs["detokenize"] = False
        return vllm.SamplingParams(**kwargs)

    ours = SamplingParams(
        n=args.samples,
        temperature=1.0,
        max_tokens=args.response_len,
        ignore_eos=True,
        seed=args.seed,
    )
    sides = {
        "direct": lambda: generated_tokens(
            llm.generate(token_prompts, direct_params(True), use_tqdm=False)
        ),
        "direct_no_detok": lambda: generated_tokens(
            llm.generate(token_prompts, direct_params(False), use_tqdm=False)
        ),
        "adapter": lambda: sum(
            len(g.response_ids) for group in engine.generate_ids(prompts, ours) for g in group
        ),
    }
    seconds: dict[str, list[float]] = {k: [] for k in sides}
    tokens: dict[str, int] = {}
    for call in sides.values():  # warm-up
        call()
    for _ in range(args.repeats):
        for name, call in sides.items():
            elapsed, n = timed(call)
            seconds[name].append(elapsed)
            tokens[name] = int(n)
    result = {}
    for name in sides:
        best = min(seconds[name])
        result[name] = {
            "tokens": tokens[name],
            "seconds": [round(s, 4) for s in seconds[name]],
            "tokens_per_s": round(tokens[name] / best, 1),
        }
    out["rollout"] = result
    out["adapter_over_direct"] = round(
        result["adapter"]["tokens_per_s"] / result["direct"]["tokens_per_s"], 4
    )
    out["adapter_over_direct_no_detok"] = round(
        result["adapter"]["tokens_per_s"] / result["direct_no_detok"]["tokens_per_s"], 4
    )
    for name, r in result.items():
        print(f"rollout {name}: {r['tokens_per_s']:.1f} tokens/s ({r['tokens']} tokens)")
    print(f"ratio adapter/direct: {out['adapter_over_direct']:.4f} (goal >= 0.95)")


def greedy_group(engine, prompts: list[list[int]], out: dict) -> None:
    """A greedy group of 4 (``n > 1`` at temperature 0, which vLLM refuses as one request):
    4 responses per prompt, identical, each with its own log-probs."""
    params = SamplingParams(n=4, temperature=0.0, max_tokens=16)
    groups = engine.generate_ids(prompts[:2], params)
    out["greedy_group"] = {
        "groups": len(groups),
        "sizes": [len(g) for g in groups],
        "identical_within_group": all(len({tuple(x.response_ids) for x in g}) == 1 for g in groups),
        "logprobs_per_token": all(
            len(x.logprobs) == len(x.response_ids) for g in groups for x in g
        ),
        "logprob_spread": round(
            max(
                max(abs(a - b) for a, b in zip(g[0].logprobs, x.logprobs, strict=True))
                for g in groups
                for x in g
            ),
            6,
        ),
    }
    print(f"greedy group: {out['greedy_group']}")


def weight_sync(engine, model_dir: Path, prompts: list[list[int]], args, out: dict) -> None:
    """``load_weights`` of a trainer-side copy, awake and after ``release_memory``."""
    from safetensors.torch import load_file

    device = "cuda" if CUDA else "cpu"
    files = sorted(model_dir.glob("*.safetensors"))
    state_dict: dict[str, torch.Tensor] = {}
    for f in files:
        state_dict.update(load_file(str(f), device=device))
    nbytes = sum(t.numel() * t.element_size() for t in state_dict.values())
    greedy = SamplingParams(n=1, temperature=0.0, max_tokens=8)
    before = [g[0].response_ids for g in engine.generate_ids(prompts[:4], greedy)]
    awake, asleep = [], []
    version = 0
    for _ in range(args.repeats + 1):  # the first of each is a warm-up
        version += 1
        elapsed, _ = timed(lambda v=version: engine.load_weights(state_dict, v))
        awake.append(elapsed)
        engine.release_memory()
        version += 1
        elapsed, _ = timed(lambda v=version: engine.load_weights(state_dict, v))
        asleep.append(elapsed)
        engine.generate_ids(prompts[:1], greedy)  # wakes the KV cache, as the next step would
    after = [g[0].response_ids for g in engine.generate_ids(prompts[:4], greedy)]
    # the weights do arrive: zeros change the greedy tokens, the originals bring them back
    engine.load_weights({k: torch.zeros_like(v) for k, v in state_dict.items()}, version + 1)
    zeroed = [g[0].response_ids for g in engine.generate_ids(prompts[:4], greedy)]
    engine.load_weights(state_dict, version + 2)
    restored = [g[0].response_ids for g in engine.generate_ids(prompts[:4], greedy)]
    out["weight_sync"] = {
        "bytes": nbytes,
        "tensors": len(state_dict),
        "bucket_mb": args.bucket_mb,
        "path": "in-process" if engine.in_process else "ipc",
        "awake_seconds": [round(s, 4) for s in awake[1:]],
        "asleep_seconds": [round(s, 4) for s in asleep[1:]],
        "awake_best_s": round(min(awake[1:]), 4),
        "asleep_best_s": round(min(asleep[1:]), 4),
        "time/sync_weight": round(engine.last_sync_s, 4),
        "same_greedy_tokens_after_reload": before == after,
        "zero_weights_change_greedy_tokens": zeroed != before,
        "original_weights_restore_them": restored == before,
    }
    ws = out["weight_sync"]
    print(
        f"weight sync ({ws['path']}, {nbytes / 2**30:.2f} GiB, {len(state_dict)} tensors): "
        f"awake {ws['awake_best_s']:.4f} s, after sleep {ws['asleep_best_s']:.4f} s (goal <= 0.2)"
    )
    print(
        f"greedy tokens: same after reloading the same weights {before == after}, changed by "
        f"zero weights {zeroed != before}, restored by the originals {restored == before}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--response-len", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bucket-mb", type=int, default=256)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-root", default=None, help="where the random model is built")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, CPU allowed (test)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.smoke:
        args.prompts, args.samples, args.prompt_len = 2, 2, 8
        args.response_len, args.repeats, args.bucket_mb = 4, 1, 1
    if not CUDA:
        gpu_grpo.DEVICE = "cpu"  # only the fake vLLM runs here
    root = Path(args.model_root or tempfile.mkdtemp(prefix="vllm_bench_"))
    model_dir = gpu_grpo.build_model(root, args.seed, tiny=args.smoke)
    import vllm

    engine = build_engine(
        "vllm",
        str(model_dir),
        dtype="bfloat16",
        seed=args.seed,
        max_model_len=args.prompt_len + args.response_len + 8,
        gpu_memory_utilization=args.gpu_memory_utilization,
        enable_sleep_mode=True,
        max_num_seqs=max(256, args.prompts * args.samples),
        sync_bucket_bytes=args.bucket_mb * 2**20,
    )
    prompts = gpu_grpo.random_prompts(args.prompts, args.prompt_len, args.seed)
    out: dict = {
        "vllm_version": getattr(vllm, "__version__", "unknown"),
        "device": torch.cuda.get_device_name() if CUDA else "cpu",
        "workload": {
            "prompts": args.prompts,
            "samples": args.samples,
            "prompt_len": args.prompt_len,
            "response_len": args.response_len,
            "repeats": args.repeats,
            "model": "tiny random (smoke)" if args.smoke else "Qwen2.5-1.5B-shaped random, bf16",
        },
    }

    def report() -> None:
        text = json.dumps(out, indent=2)
        print(text)
        if os.environ.get("OUT"):
            Path(os.environ["OUT"], "vllm_engine.json").write_text(text)
        if args.json:
            Path(args.json).write_text(text)

    import traceback

    phases = {
        "rollout": lambda: rollout(engine, prompts, args, out),
        "greedy_group": lambda: greedy_group(engine, prompts, out),
        "weight_sync": lambda: weight_sync(engine, model_dir, prompts, args, out),
    }
    for name, phase in phases.items():  # one phase failing leaves the others' figures
        try:
            phase()
        except Exception:  # noqa: BLE001 - recorded, reported, exit 1
            out.setdefault("errors", {})[name] = traceback.format_exc()[-4000:]
            print(f"{name} failed:\n{out['errors'][name]}", file=sys.stderr)
    report()
    if out.get("errors"):
        sys.exit(1)


if __name__ == "__main__":
    main()
