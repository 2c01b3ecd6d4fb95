"""The demo judge's figures: ``trinity init-demo --judge``'s training time and the trained judge's
agreement with the truth on held-out questions, per PyTorch CPU kernel path.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/demo_judge.py [--paths default,avx2,avx512]
        [--groups 200] [--json figures.json] [--judge-dir var/demo/judge]

For each kernel path (``ATEN_CPU_CAPABILITY``), in a child process of its own (the variable is
read when torch loads): ``build_demo(..., judge=True)`` into a temporary directory, timed (the
demo files take seconds, the rest is the judge's training), then
``rft_core.demo_judge.measure_judge`` on ``--groups`` held-out questions x 4 answers, greedy,
twice: answers drawn like a warmed-up policy's groups (``policy_like_answer``) and like the
training mix (``candidate_answer``). ``--judge-dir`` measures a judge already built (no training,
no timing). Prints one JSON line per path; nothing is asserted (the training takes tens of
CPU-minutes, too long for the test suite).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(groups: int, judge_dir: str | None = None) -> dict:
    """Build and measure the judge in this process (one kernel path); with ``judge_dir``, measure
    that judge (e.g. ``var/demo/judge`` from ``trinity init-demo --judge``) without building."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rft_core.demo import build_demo, split_problems
    from rft_core.demo_judge import candidate_answer, measure_judge

    build_s = build_cpu_s = None
    if judge_dir:
        model = AutoModelForCausalLM.from_pretrained(judge_dir)
        tokenizer = AutoTokenizer.from_pretrained(judge_dir)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            start, cpu_start = time.perf_counter(), time.process_time()
            paths = build_demo(Path(tmp) / "demo", judge=True)
            build_s, build_cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
            model = AutoModelForCausalLM.from_pretrained(paths.judge_dir)
            tokenizer = AutoTokenizer.from_pretrained(paths.judge_dir)
    _, held_out = split_problems(0)
    policy = measure_judge(model, tokenizer, held_out, groups=groups)
    mix = measure_judge(model, tokenizer, held_out, groups=groups, draw=candidate_answer)
    return {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "init_demo_judge_s": build_s and round(build_s, 1),
        # process time: the figure a machine's load leaves alone
        "init_demo_judge_cpu_s": build_cpu_s and round(build_cpu_s, 1),
        "policy_like": policy,
        "training_mix": mix,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paths", default="default,avx2,avx512")
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--json", help="also write the figures (a list) to this file")
    parser.add_argument(
        "--judge-dir", help="measure this built judge (e.g. var/demo/judge) instead of building one"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.groups, args.judge_dir)), flush=True)
        return 0
    figures = []
    for path in args.paths.split(","):
        env = dict(os.environ, ATEN_CPU_CAPABILITY=path, PYTHONPATH=str(ROOT))
        out = subprocess.run(
            [sys.executable, __file__, "--child", "--groups", str(args.groups)]
            + (["--judge-dir", args.judge_dir] if args.judge_dir else []),
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        row = {"path": path, **json.loads(out.strip().splitlines()[-1])}
        print(json.dumps(row), flush=True)
        figures.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
