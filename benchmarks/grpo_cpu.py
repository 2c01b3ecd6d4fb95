"""GRPO seconds per step on CPU: rft_core against TRL's ``GRPOTrainer``, same workload, one run.

    .venv/bin/python benchmarks/grpo_cpu.py [--prompts 8 --group 8 --response-len 48 --steps 5]

Both sides train the same tiny model (``trinity init-demo``'s Qwen2, fp32) on the same
GSM8K-style prompts (system prompt + question through the chat template), with the same batch
(prompts per step × group size completions), the same maximum response length, temperature,
learning rate, KL coefficient (a reference model on both sides) and torch thread count.

One step is, on each side:

* rft_core (in-process, no Ray): the ``hf`` rollout engine samples ``group`` responses for
  each of ``prompts`` tasks through ``math_workflow`` (which scores them with ``math_reward``),
  GRPO group advantages, one ``PolicyUpdater.train_step`` (reference log-probs, PPO-clip loss,
  one optimizer step), then the in-memory weight copy from the trainer back into the rollout
  engine (what ``sync_interval: 1`` costs).
* TRL: one optimizer step of ``GRPOTrainer`` with ``per_device_train_batch_size = prompts ×
  group`` and ``num_generations = group``: ``model.generate``, the reward function (the same
  ``math_reward``), the reference model's log-probs, the loss and the optimizer step, timed
  from ``on_step_begin`` to ``on_step_end``.

The two sides are interleaved by default (one TRL step, then one rft_core step from TRL's
``on_step_end`` callback, outside TRL's timing) so that both see the same load on a shared
machine; ``--schedule sequential`` runs them one after the other. The first ``--warmup`` steps
of each side are discarded; figures are medians of the measured steps. The ratio printed is
TRL s/step ÷ rft_core s/step (above 1: rft_core is faster). ``--trinity-run`` adds the wall
time per step of a full ``trinity run`` (Ray actors) on the same workload. Only the wall clock
is compared; nothing here checks that either side learns.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# TRL and transformers must never reach the network during the benchmark.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # run as a script from a checkout without `pip install -e .`
    sys.path.insert(0, str(REPO_ROOT))


@dataclass
class Workload:
    """Everything both sides share; printed with the results so a figure carries its settings."""

    model_dir: str
    dataset_dir: str  # GSM8K-style taskset directory (subset main, split train)
    prompts: int  # tasks per step
    group: int  # responses per task (GRPO group size; TRL num_generations)
    response_len: int  # max new tokens per response
    steps: int  # measured steps per side
    warmup: int  # discarded steps per side
    temperature: float
    lr: float
    kl_coef: float
    threads: int
    seed: int
    questions: list[str] = field(repr=False, default_factory=list)
    answers: list[str] = field(repr=False, default_factory=list)
    system_prompt: str = ""

    @property
    def total_steps(self) -> int:
        return self.warmup + self.steps

    def step_rows(self, step: int) -> tuple[list[str], list[str]]:
        """Questions and GSM8K answers of one step (the same rows on both sides)."""
        lo = step * self.prompts
        return self.questions[lo : lo + self.prompts], self.answers[lo : lo + self.prompts]

    def conversation(self, question: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": question},
        ]

    def settings(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("questions")
        out.pop("answers")
        return out


@dataclass
class SideResult:
    name: str
    what: str
    step_seconds: list[float]  # measured steps only
    warmup_seconds: list[float]
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.step_seconds)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.step_seconds)

    @property
    def stdev(self) -> float:
        return statistics.stdev(self.step_seconds) if len(self.step_seconds) > 1 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "what": self.what,
            "s_per_step": self.median,
            "s_per_step_mean": self.mean,
            "s_per_step_stdev": self.stdev,
            "step_seconds": self.step_seconds,
            "warmup_seconds": self.warmup_seconds,
            "notes": self.notes,
        }


# ---------------------------------------------------------------------------------------------
# The workload
# ---------------------------------------------------------------------------------------------


def prepare_workload(args: argparse.Namespace, demo_dir: Path) -> Workload:
    """Build (or reuse) the demo directory and read the prompts of every step from its train split."""
    import pyarrow.parquet as pq
    import torch

    from rft_core.demo import DEMO_SYSTEM_PROMPT, build_demo

    paths = build_demo(demo_dir, seed=0)
    table = pq.read_table(paths.train_path).to_pydict()
    workload = Workload(
        model_dir=str(paths.model_dir),
        dataset_dir=str(paths.dataset_dir),
        prompts=args.prompts,
        group=args.group,
        response_len=args.response_len,
        steps=args.steps,
        warmup=args.warmup,
        temperature=args.temperature,
        lr=args.lr,
        kl_coef=args.kl_coef,
        threads=args.threads or torch.get_num_threads(),
        seed=args.seed,
        system_prompt=DEMO_SYSTEM_PROMPT,
    )
    needed = workload.prompts * workload.total_steps
    if needed > len(table["question"]):
        raise SystemExit(
            f"--prompts × (--steps + --warmup) = {needed} rows, the demo train split has "
            f"{len(table['question'])}; lower one of them"
        )
    workload.questions = table["question"][:needed]
    workload.answers = table["answer"][:needed]
    torch.set_num_threads(workload.threads)
    return workload


def math_reward_fn():
    """rft_core's ``math_reward`` (the one ``math_workflow`` uses): ``fn(response, truth) -> parts``."""
    from rft_core import rewards

    return rewards.get("math_reward")


# ---------------------------------------------------------------------------------------------
# rft_core, in-process
# ---------------------------------------------------------------------------------------------

RFT_WHAT = (
    "rft_core in-process (no Ray): hf engine rollout via math_workflow + math_reward + "
    "grpo advantages + PolicyUpdater.train_step + weight copy to the engine"
)


class RftCoreSide:
    """rft_core's GRPO step, one call of :meth:`step` at a time (so it can interleave with TRL)."""

    name = "rft_core"

    def __init__(self, w: Workload) -> None:
        import torch

        from rft_core import workflows
        from rft_core.algorithms.advantages import get_advantage_fn
        from rft_core.config.schema import AlgorithmConfig, OptimizerConfig
        from rft_core.rollout import build_engine
        from rft_core.trainer.policy import PolicyUpdater

        torch.manual_seed(w.seed)
        self.w = w
        algorithm = AlgorithmConfig(
            algorithm_type="grpo",
            repeat_times=w.group,
            optimizer=OptimizerConfig(lr=w.lr),
            kl_loss_fn="k3",  # TRL's KL estimator, so both sides compute the same terms
            kl_loss_fn_args={"kl_coef": w.kl_coef},
        )
        self.engine = build_engine("hf", w.model_dir, dtype="float32", device="cpu", seed=w.seed)
        self.policy = PolicyUpdater(
            w.model_dir,
            algorithm,
            device="cpu",
            dtype="float32",
            micro_batch_size=w.prompts * w.group,  # one forward/backward, as TRL's step
            total_steps=w.total_steps,
            temperature=w.temperature,
            seed=w.seed,
        )
        self.workflow = workflows.get("math_workflow")()
        self.grpo = get_advantage_fn("grpo")
        self.times: list[float] = []
        self.rewards: list[float] = []
        self.responses: list[int] = []
        self.parts: list[dict[str, float]] = []  # seconds per phase, for the profile line

    def tasks(self, step: int) -> list:
        from rft_core.data.task import Task

        w = self.w
        questions, answers = w.step_rows(step)
        rollout_args = {"temperature": w.temperature, "max_tokens": w.response_len}
        return [
            Task(
                index=step * w.prompts + i,
                taskset="bench",
                raw={"question": q, "answer": a},
                prompt=q,
                truth=a,
                system_prompt=w.system_prompt,
                workflow="math_workflow",
                reward_fn="math_reward",
                rollout_args=dict(rollout_args),
            )
            for i, (q, a) in enumerate(zip(questions, answers, strict=True))
        ]

    def step(self, step: int) -> float:
        from rft_core.explorer.explorer import apply_group_advantages

        tasks = self.tasks(step)
        t0 = time.perf_counter()
        experiences = self.workflow.run_batch(tasks, self.engine, self.w.group)
        t1 = time.perf_counter()
        experiences = apply_group_advantages(experiences, self.grpo, {})
        self.policy.train_step(experiences)
        t2 = time.perf_counter()
        self.engine.load_weights(self.policy.state_dict_for_sync(), step + 1)
        t3 = time.perf_counter()
        self.times.append(t3 - t0)
        self.parts.append(
            {"rollout+reward": t1 - t0, "train_step": t2 - t1, "weight_sync": t3 - t2}
        )
        self.rewards.append(statistics.fmean(e.reward for e in experiences))
        self.responses.append(len(experiences))
        _progress(self.name, step, self.w, self.times[-1])
        return self.times[-1]

    def result(self) -> SideResult:
        w = self.w
        measured = self.parts[w.warmup :]
        phases = {k: statistics.median(p[k] for p in measured) for k in measured[0]}
        return SideResult(
            self.name,
            RFT_WHAT,
            self.times[w.warmup :],
            self.times[: w.warmup],
            {
                "kl": f"k3 (kl_coef {w.kl_coef}) with a reference model",
                "loss": "ppo-clip, token-mean",
                "median_phase_seconds": phases,
                "responses_per_step": self.responses,
                "mean_reward": statistics.fmean(self.rewards),
            },
        )


# ---------------------------------------------------------------------------------------------
# TRL
# ---------------------------------------------------------------------------------------------

TRL_WHAT = "TRL GRPOTrainer: one optimizer step (generate + reward + ref log-probs + loss + step)"


def run_trl(
    w: Workload, reward: Any = None, between_steps: Callable[[int], Any] | None = None
) -> SideResult:
    """TRL's GRPOTrainer on the workload; ``reward`` = ``fn(response, truth) -> dict`` (default
    rft_core's ``math_reward``), wrapped as a TRL reward function. ``between_steps(k)`` runs
    after TRL's step ``k`` (outside its timing): the interleaved schedule runs rft_core there."""
    import torch
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    reward = reward or math_reward_fn()

    responses_per_call: list[int] = []

    def math_reward(completions: list, answer: list[str], **_: Any) -> list[float]:
        responses_per_call.append(len(completions))
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [float(sum(reward(t, a).values())) for t, a in zip(texts, answer, strict=True)]

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self._start = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self._start)
            _progress("TRL", len(self.times) - 1, w, self.times[-1])
            if between_steps is not None:
                between_steps(len(self.times) - 1)

    torch.manual_seed(w.seed)
    rows = {
        "prompt": [w.conversation(q) for q in w.questions],
        "answer": list(w.answers),
    }
    dataset = Dataset.from_dict(rows)
    out_dir = tempfile.TemporaryDirectory(prefix="grpo_bench_trl_")
    config = GRPOConfig(
        output_dir=out_dir.name,
        per_device_train_batch_size=w.prompts * w.group,  # completions per optimizer step
        gradient_accumulation_steps=1,
        num_generations=w.group,
        generation_batch_size=w.prompts * w.group,
        max_completion_length=w.response_len,
        temperature=w.temperature,
        top_p=1.0,
        top_k=0,
        num_iterations=1,
        beta=w.kl_coef,  # > 0 loads a reference model, as rft_core's kl_loss does
        loss_type="dapo",  # token-mean over the batch, like rft_core's default
        learning_rate=w.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_steps=w.total_steps,
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,  # TRL turns it on by default; off is TRL's faster setting
        shuffle_dataset=False,  # the same prompts, in the same order, as rft_core
        dataloader_num_workers=0,
        save_strategy="no",
        report_to=[],
        logging_steps=1,
        disable_tqdm=True,
        seed=w.seed,
        model_init_kwargs={"dtype": torch.float32},
    )
    timer = StepTimer()
    trainer = GRPOTrainer(
        model=w.model_dir,
        reward_funcs=[math_reward],
        args=config,
        train_dataset=dataset,
        callbacks=[timer],
    )
    trainer.remove_callback(PrinterCallback)  # the per-step log dicts would drown the figures
    with out_dir:
        trainer.train()
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    return SideResult(
        "TRL",
        TRL_WHAT,
        timer.times[w.warmup :],
        timer.times[: w.warmup],
        {
            "trl_version": _version("trl"),
            "kl": f"k3 (beta {w.kl_coef}) with a reference model",
            "loss": "dapo (token-mean), clip epsilon 0.2",
            "gradient_checkpointing": False,
            "responses_per_step": responses_per_call,
            "mean_reward": statistics.fmean(rewards) if rewards else None,
        },
    )


# ---------------------------------------------------------------------------------------------
# `trinity run` (Ray actors), optional
# ---------------------------------------------------------------------------------------------

TRINITY_WHAT = (
    "trinity run, mode both on Ray (explorer + trainer actors, nccl/gloo sync every step): "
    "wall time between consecutive trainer steps"
)


def trinity_config(w: Workload, root: Path) -> dict[str, Any]:
    """The workload as a Trinity YAML (written as JSON, which YAML reads)."""
    fmt = {"prompt_key": "question", "response_key": "answer", "system_prompt": w.system_prompt}
    return {
        "project": "bench",
        "name": "grpo_cpu",
        "checkpoint_root_dir": str(root / "checkpoints"),
        "continue_from_checkpoint": False,
        "mode": "both",
        "algorithm": {
            "algorithm_type": "grpo",
            "repeat_times": w.group,
            "optimizer": {"lr": w.lr},
            "kl_loss_fn": "k3",
            "kl_loss_fn_args": {"kl_coef": w.kl_coef},
        },
        "model": {
            "model_path": w.model_dir,
            "max_response_tokens": w.response_len,
            "max_model_len": 128 + w.response_len,
            "temperature": w.temperature,
        },
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {
            "batch_size": w.prompts,
            "total_steps": w.total_steps,
            "explorer_input": {
                "taskset": {
                    "name": "bench",
                    "storage_type": "file",
                    "path": w.dataset_dir,
                    "subset_name": "main",
                    "split": "train",
                    "format": fmt,
                    "rollout_args": {"temperature": w.temperature},
                    "default_workflow_type": "math_workflow",
                    "default_reward_fn_type": "math_reward",
                }
            },
            "trainer_input": {"experience_buffer": {"name": "bench", "storage_type": "queue"}},
        },
        "explorer": {
            "eval_on_startup": False,
            "rollout_model": {"engine_type": "hf", "dtype": "float32"},
        },
        "synchronizer": {"sync_method": "nccl", "sync_interval": 1},
        "trainer": {
            "save_interval": 0,
            "save_hf_checkpoint": "never",
            "micro_batch_size_per_gpu": w.prompts * w.group,
            # one micro-batch a step, as the in-process side (the derived default,
            # 2 x max_model_len tokens, would cut it into ~20 micro-batches)
            "max_token_len_per_gpu": w.prompts * w.group * (128 + w.response_len),
        },
    }


def run_trinity(w: Workload) -> SideResult:
    """``trinity run`` on the workload in a child process; seconds per step from the trainer's
    metric timestamps (``monitor/trainer_metrics.jsonl``)."""
    import subprocess

    with tempfile.TemporaryDirectory(prefix="grpo_bench_trinity_") as tmp:
        root = Path(tmp)
        config = root / "bench.yaml"
        config.write_text(json.dumps(trinity_config(w, root), indent=2))
        cmd = [sys.executable, "-m", "rft_core.cli", "run", "--config", str(config)]
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"trinity run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        monitor = root / "checkpoints" / "bench" / "grpo_cpu" / "monitor"
        rows = {
            role: [
                json.loads(line)
                for line in (monitor / f"{role}_metrics.jsonl").read_text().splitlines()
            ]
            for role in ("explorer", "trainer")
        }
    stamps = [row["time"] for row in rows["trainer"] if "time/train_step" in row]
    # the actors' own timers, as medians over the steps after the first
    phases = {
        f"{role}:{key}": statistics.median(values)
        for role, role_rows in rows.items()
        for key in sorted({k for r in role_rows for k in r if k.startswith("time/")})
        if (values := [r[key] for r in role_rows if key in r and r["step"] > 1])
    }
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]  # gap k ends step k + 2
    skip = max(0, w.warmup - 1)
    for step, seconds in enumerate(gaps, start=2):
        _progress("trinity run", step - 1, w, seconds)
    return SideResult(
        "trinity run",
        TRINITY_WHAT,
        gaps[skip:],
        gaps[:skip],
        {
            "process_wall_seconds": wall,
            "torch_threads": "the launcher's (every core)",
            "median_phase_seconds": phases,
        },
    )


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------


def _progress(side: str, step: int, w: Workload, seconds: float) -> None:
    tag = "warm-up" if step < w.warmup else "measured"
    print(f"  [{side}] step {step + 1}/{w.total_steps} ({tag}): {seconds:.3f} s", flush=True)


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def report(w: Workload, results: list[SideResult]) -> dict[str, Any]:
    """Print the figures and return them as one dict (what ``--json`` writes)."""
    by_name = {r.name: r for r in results}
    print()
    print(
        f"workload: {w.prompts} prompts x group {w.group} = {w.prompts * w.group} responses/step, "
        f"max {w.response_len} response tokens, temperature {w.temperature}, lr {w.lr}, "
        f"KL coef {w.kl_coef}, fp32, {w.threads} torch threads, {w.steps} measured steps "
        f"after {w.warmup} warm-up, model {w.model_dir}"
    )
    for r in results:
        print(
            f"{r.name}: {r.median:.3f} s/step (median; mean {r.mean:.3f} ± {r.stdev:.3f}) "
            f"— {r.what}"
        )
        phases = r.notes.get("median_phase_seconds")
        if phases:
            print("  median per phase: " + ", ".join(f"{k} {v:.3f} s" for k, v in phases.items()))
    out: dict[str, Any] = {
        "workload": w.settings(),
        "results": {r.name: r.to_dict() for r in results},
        "load_average": os.getloadavg(),
    }
    if "rft_core" in by_name and "TRL" in by_name:
        ratio = by_name["TRL"].median / by_name["rft_core"].median
        out["ratio_trl_over_rft_core"] = ratio
        verdict = "meets" if ratio >= 2.0 else "misses"
        print(
            f"ratio TRL/rft_core: {ratio:.2f}x (TRL s/step ÷ rft_core s/step, medians; "
            f"{verdict} the 2x goal)"
        )
    if "trinity run" in by_name and "TRL" in by_name:
        ratio = by_name["TRL"].median / by_name["trinity run"].median
        out["ratio_trl_over_trinity_run"] = ratio
        print(f"ratio TRL/trinity run: {ratio:.2f}x")
    print(f"load average during the run: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=8, help="tasks per step (default 8)")
    p.add_argument("--group", type=int, default=8, help="responses per task (default 8)")
    p.add_argument("--response-len", type=int, default=48, help="max response tokens (48)")
    p.add_argument("--steps", type=int, default=5, help="measured steps per side (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="discarded steps per side (default 1)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--kl-coef", type=float, default=0.001, help="KL coefficient (TRL beta)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads, both sides (default 1: on a shared machine several threads spin "
        "against other processes and the figures swing 10x; 0 = torch's default)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--demo-dir", help="demo directory to build or reuse (default: a temp dir)")
    p.add_argument(
        "--only", choices=["rft_core", "trl"], help="run one side only (no ratio is printed)"
    )
    p.add_argument(
        "--schedule",
        choices=["interleaved", "sequential"],
        default="interleaved",
        help="interleaved (default): alternate one TRL step and one rft_core step, so both see "
        "the same machine load; sequential: all rft_core steps, then all TRL steps",
    )
    p.add_argument(
        "--trinity-run",
        action="store_true",
        help="also time `trinity run` (Ray actors) on the workload, after the two sides",
    )
    p.add_argument("--json", help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    if args.group < 2:
        p.error("--group must be at least 2 (GRPO needs a group; TRL refuses fewer)")
    if min(args.prompts, args.response_len, args.steps) < 1 or args.warmup < 0:
        p.error("--prompts, --response-len and --steps must be ≥ 1, --warmup ≥ 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.demo_dir:
        return run(args, Path(args.demo_dir))
    with tempfile.TemporaryDirectory(prefix="grpo_bench_") as demo_dir:
        return run(args, Path(demo_dir))


def run(args: argparse.Namespace, demo_dir: Path) -> int:
    """The whole benchmark on the demo under ``demo_dir`` (built there when missing)."""
    w = prepare_workload(args, demo_dir)
    results: list[SideResult] = []
    if args.only == "trl":
        print(f"TRL {_version('trl')}: {TRL_WHAT}", flush=True)
        results.append(run_trl(w))
    else:
        print(f"rft_core: {RFT_WHAT}", flush=True)
        rft = RftCoreSide(w)
        if args.only == "rft_core" or args.schedule == "sequential":
            for step in range(w.total_steps):
                rft.step(step)
        if args.only is None:
            print(f"TRL {_version('trl')}: {TRL_WHAT}", flush=True)
            # interleaved: one rft_core step after each TRL step, so that both sides see the
            # same (shared, fluctuating) machine load
            hook = rft.step if args.schedule == "interleaved" else None
            results.append(run_trl(w, between_steps=hook))
        results.insert(0, rft.result())
    if args.trinity_run:
        print(f"trinity run: {TRINITY_WHAT}", flush=True)
        results.append(run_trinity(w))
    figures = report(w, results)
    figures["schedule"] = args.schedule if args.only is None else f"only {args.only}"
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
