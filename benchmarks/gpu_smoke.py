"""GPU smoke run with timings, for a CUDA machine (the lent H200); prints one JSON object.

    python3 benchmarks/gpu_smoke.py        # from the repository root; needs torch + transformers

On a random Qwen2.5-0.5B-shaped model (24 layers, hidden 896) with the demo's byte tokenizer:

* the hf engine on CUDA: per-row response budgets under ``max_model_len`` and prompts cut to
  ``max_prompt_tokens``; a rollout of 8 prompts x 8 samples x 96 tokens, timed;
* ``PolicyUpdater`` on CUDA (fp32 master weights, bf16 autocast): the largest gap between the
  engine's and the trainer's log-probs of the sampled tokens, ``train_step`` times, ``save`` +
  ``add_hf_weights`` and a reload of the HF weights;
* the sharded (FSDP2) path on one GPU: a one-rank NCCL group, with PolicyUpdater told there are
  two ranks so that it shards (DTensor parameters, bf16 mixed precision, gathered state dicts,
  world-size-2 checkpoint files, resume). Its collectives then run on the real one-rank group
  and its loss scale is 2x: this checks the code path, not the numbers (those are checked on CPU
  by ``tests/core/trainer/test_trainer_ranks.py``).

It needs no Ray, OmegaConf or datasets (the device image has none of them).
"""

from __future__ import annotations

import json
import os
import sys
import time
import types
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "core"))

from tiny_lm import build_tiny_model  # noqa: E402
from transformers import Qwen2ForCausalLM  # noqa: E402

from rft_core.experience import Experience  # noqa: E402
from rft_core.rollout import SamplingParams, build_engine  # noqa: E402
from rft_core.trainer.policy import PolicyUpdater  # noqa: E402

ROOT = Path("/tmp/rft_gpu_smoke")


def timed(fn) -> tuple[float, object]:
    torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start, result


def build_model() -> Path:
    """A random model of Qwen2.5-0.5B's shape with the demo's byte tokenizer."""
    return build_tiny_model(
        ROOT / "model",
        hidden=896,
        layers=24,
        intermediate_size=4864,
        num_attention_heads=14,
        max_position_embeddings=2048,
    )


def trainer(model_dir: Path, algo: object, *, pretend_ranks: int | None = None) -> PolicyUpdater:
    if pretend_ranks is None:
        return PolicyUpdater(
            str(model_dir), algo, device="cuda", micro_batch_size=64, loss_horizon=96
        )
    real = dist.get_world_size
    dist.get_world_size = lambda *a, **k: pretend_ranks
    try:
        return PolicyUpdater(
            str(model_dir), algo, device="cuda", micro_batch_size=64, loss_horizon=96
        )
    finally:
        dist.get_world_size = real


def main() -> None:
    out: dict[str, object] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    ROOT.mkdir(exist_ok=True)
    model_dir = build_model()

    engine = build_engine(
        "hf", str(model_dir), device="cuda", max_model_len=40, max_prompt_tokens=16, seed=1
    )
    engine.eos_token_ids = set()  # responses run to their budget
    short, long = list(range(5, 13)), list(range(5, 35))
    gens = engine.generate_ids([short, long], SamplingParams(temperature=0, max_tokens=30))
    out["response_budgets_short_long"] = [len(g[0].response_ids) for g in gens]  # 30, 24
    out["long_prompt_kept_its_end"] = gens[1][0].prompt_ids == long[-16:]

    engine = build_engine("hf", str(model_dir), device="cuda", max_model_len=1024, seed=1)
    chats = [[{"role": "user", "content": f"What is {i} + {i + 7}?"}] for i in range(8)]
    seconds, groups = timed(
        lambda: engine.chat(chats, SamplingParams(n=8, temperature=1.0, max_tokens=96))
    )
    out["rollout_s_8x8x96"] = seconds
    experiences = [
        Experience(
            prompt_ids=g.prompt_ids,
            response_ids=g.response_ids,
            logprobs=g.logprobs,
            reward=float(i % 2),
            advantage=1.0 if i % 2 else -1.0,
            group_id=f"g{k}",
        )
        for k, group in enumerate(groups)
        for i, g in enumerate(group)
    ]
    algo = types.SimpleNamespace(algorithm_type="grpo", optimizer=types.SimpleNamespace(lr=1e-6))

    policy = trainer(model_dir, algo)
    recomputed = policy.logprobs_of(experiences)
    out["engine_vs_trainer_logprob_max_abs_diff"] = max(
        abs(a - b)
        for lp, e in zip(recomputed, experiences, strict=True)
        for a, b in zip(lp, e.logprobs, strict=True)
    )
    steps = [timed(lambda: policy.train_step(experiences)) for _ in range(4)]
    out["train_step_s"] = [s for s, _ in steps]
    out["pg_clipfrac_first_step"] = steps[0][1]["actor/pg_clipfrac"]
    policy.save(ROOT / "job", 4, False)
    policy.add_hf_weights(ROOT / "job", 4)
    hf = ROOT / "job" / "global_step_4" / "actor" / "huggingface"
    loaded = Qwen2ForCausalLM.from_pretrained(hf).state_dict()
    weights = policy.state_dict_for_sync()
    out["hf_weights_equal"] = all(
        torch.equal(loaded[k], weights[k].float()) for k in loaded if k in weights
    )

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29555")
    dist.init_process_group("nccl", rank=0, world_size=1)
    sharded = trainer(model_dir, algo, pretend_ranks=2)
    steps = [timed(lambda: sharded.train_step(experiences)) for _ in range(3)]
    sharded.save(ROOT / "job2", 3, False)
    sharded.add_hf_weights(ROOT / "job2", 3)
    weights = sharded.state_dict_for_sync()
    actor = ROOT / "job2" / "global_step_3" / "actor"
    loaded = Qwen2ForCausalLM.from_pretrained(actor / "huggingface").state_dict()
    resumed = trainer(model_dir, algo, pretend_ranks=2)
    out["sharded"] = {
        "sharded": sharded.sharded,
        "device": str(sharded.device),
        "parameter_type": type(next(sharded.model.parameters())).__name__,
        "train_step_s": [s for s, _ in steps],
        "grad_norm_finite": all(
            torch.isfinite(torch.tensor(m["actor/grad_norm"])) for _, m in steps
        ),
        "checkpoint_files": sorted(p.name for p in actor.glob("*.pt")),
        "hf_weights_equal": all(
            torch.equal(loaded[k], weights[k].float()) for k in loaded if k in weights
        ),
        "resumed_step": resumed.load(ROOT / "job2", 3),
        "resumed_weights_equal": all(
            torch.equal(v, weights[k]) for k, v in resumed.state_dict_for_sync().items()
        ),
    }
    dist.destroy_process_group()
    text = json.dumps(out, indent=1)
    print(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "gpu_smoke.json").write_text(text)


if __name__ == "__main__":
    main()
