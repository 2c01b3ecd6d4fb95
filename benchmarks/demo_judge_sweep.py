"""Recipe sweep for the demo judge: train variants of ``rft_core.demo_judge``'s recipe (reply
format, steps, batch, learning rate, warm-up, depth, seed) and measure each on held-out groups.
It is how recipe 3 was chosen (``rft_core/demo_judge.py``'s doc has the figures, from the lent
H200); on a GPU a 1000-step variant takes about 25 s, on one CPU thread about 15 minutes.

    python benchmarks/demo_judge_sweep.py '[{"steps": 1000, "lr": 1e-3, "warmup": 50},
                                            {"steps": 1000, "lr": 3e-3, "reply": "copy"}]'

Keys of a variant (defaults: the recipe's): ``reply`` (``sum_beside`` the recipe's
``1:85/85=1``, ``copy`` recipe 2's ``1:85=1``, ``bare`` recipe 1's ``85 [1, 0]``), ``steps``,
``batch``, ``lr``, ``warmup``, ``layers``, ``seed``. Prints one JSON line per variant (also
appended to ``$OUT/judge_sweep.jsonl`` when ``OUT`` is set): seconds, last loss, and
``measure_judge`` on policy-like and training-mix groups. Nothing is asserted.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rft_core import demo  # noqa: E402
from rft_core import demo_judge as dj  # noqa: E402


def copy_reply(problem: demo.Problem, answers: list[str]) -> str:
    """Recipe 2's reply: each answer copied beside its call, not the sum."""
    marks = dj.judge_marks(problem, answers)
    calls = " ".join(
        f"{i + 1}:{a}={m}" for i, (a, m) in enumerate(zip(answers, marks, strict=True))
    )
    return f"{dj.digit_steps(problem)} {problem.result} {calls} [{', '.join(marks)}]"


def bare_reply(problem: demo.Problem, answers: list[str]) -> str:
    """Recipe 1's reply: the sum, then the bare list."""
    return f"{problem.result} [{', '.join(dj.judge_marks(problem, answers))}]"


REPLIES = {"sum_beside": dj.judge_reply, "copy": copy_reply, "bare": bare_reply}


def run(variant: dict) -> dict:
    seed = variant.get("seed", 0)
    steps, batch = variant.get("steps", dj.JUDGE_STEPS), variant.get("batch", dj.JUDGE_BATCH)
    tokenizer = demo.build_tokenizer()
    train, held_out = demo.split_problems(seed)
    model = demo.build_model(tokenizer, seed)
    if "layers" in variant:  # a deeper or shallower model of the same width
        demo_model, config = model, model.config
        config.num_hidden_layers = variant["layers"]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = type(demo_model)(config)
        model.generation_config = demo_model.generation_config
    model.to("cuda" if torch.cuda.is_available() else "cpu")
    rows = dj.judge_rows(
        train, steps * batch, seed, reply_of=REPLIES[variant.get("reply", "sum_beside")]
    )
    start = time.perf_counter()
    loss = dj.fit_judge(
        model,
        tokenizer,
        [row["messages"] for row in rows],
        seed=seed,
        steps=steps,
        batch_size=batch,
        lr=variant.get("lr", dj.JUDGE_LR),
        warmup=variant.get("warmup", dj.JUDGE_WARMUP),
    )
    return {
        **variant,
        "device": str(model.device),
        "seconds": round(time.perf_counter() - start, 1),
        "loss": round(loss, 4),
        "policy_like": dj.measure_judge(model, tokenizer, held_out),
        "training_mix": dj.measure_judge(model, tokenizer, held_out, draw=dj.candidate_answer),
    }


def main() -> int:
    for variant in json.loads(sys.argv[1] if len(sys.argv) > 1 else "[{}]"):
        row = run(variant)
        print(json.dumps(row), flush=True)
        if os.environ.get("OUT"):
            with open(Path(os.environ["OUT"]) / "judge_sweep.jsonl", "a") as out:
                out.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
