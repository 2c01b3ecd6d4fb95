"""Trainer forward + backward seconds per micro-batch on CPU, padded rows against packed rows
(``trainer.use_remove_padding``) and the shared-prompt layout, on the demo-sized model.

    .venv/bin/python benchmarks/trainer_layouts_cpu.py [--rows 32 --group 8 --repeats 5]

The model is ``trinity init-demo``'s shape (Qwen2, hidden 256, 4 layers, byte vocabulary, fp32)
with random weights; each of ``rows / group`` prompts (64 tokens, the demo's rendered prompt
length) gets ``group`` responses of random lengths in [8, 64]. One micro-batch holds all rows.
Printed: the median of ``repeats`` timed passes (after one warm-up) of each layout, and the
padded/packed token counts. The figure decides ``use_remove_padding``'s CPU default.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rft_core.config.schema import AlgorithmConfig
    from rft_core.demo import MODEL_SHAPE, build_tokenizer
    from rft_core.experience import Experience
    from rft_core.trainer.policy import PolicyUpdater

    tokenizer = build_tokenizer()
    directory = tempfile.mkdtemp()
    config = Qwen2Config(**MODEL_SHAPE, vocab_size=len(tokenizer))
    Qwen2ForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    rng = random.Random(0)
    experiences = []
    for _ in range(args.rows // args.group):
        prompt = [rng.randrange(3, 250) for _ in range(64)]
        for _ in range(args.group):
            response = [rng.randrange(3, 250) for _ in range(rng.randint(8, 64))]
            experiences.append(Experience(prompt_ids=prompt, response_ids=response))
    trainer = PolicyUpdater(directory, AlgorithmConfig(), device="cpu", micro_batch_size=None)
    forward = trainer.forward
    layouts = {"padded": (False, False), "packed": (True, False), "shared-prefix": (False, True)}
    for name, (pack, share) in layouts.items():
        forward.pack_rows, forward.share_prompt_prefix = pack, share
        (mb,) = forward.micro_batches(experiences)
        times = []
        for i in range(args.repeats + 1):
            start = time.perf_counter()
            logp, entropy = forward.logprobs(trainer.model, mb, entropy=True)
            (logp * mb.mask).sum().backward()
            if i:
                times.append(time.perf_counter() - start)
        trainer.model.zero_grad(set_to_none=True)
        tokens = mb.packed.input_ids.numel() if pack else mb.input_ids.numel()
        print(f"{name:>14}: {statistics.median(times) * 1e3:7.1f} ms  ({tokens} tokens run)")
    print(f"torch threads {torch.get_num_threads()}, rows {args.rows}, group {args.group}")


if __name__ == "__main__":
    main()
