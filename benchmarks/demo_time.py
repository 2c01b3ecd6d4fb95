"""Wall time of the demo, stage by stage, the machine's load while it ran, and what it learned.

    .venv/bin/python benchmarks/demo_time.py [--paths default,avx2,avx512] [--json OUT]
                                             [--config examples/demo/grpo_demo.yaml] [key=value ...]

For each PyTorch CPU kernel path in ``--paths`` (``ATEN_CPU_CAPABILITY``; empty: the machine's
own, unset) it writes the demo with ``trinity init-demo`` into a temporary directory and runs
``trinity run --config <config>`` on it in a child process (the overrides after the options go
to ``trinity run``), one path after the other. Printed per path:

- ``total``: wall seconds from starting ``trinity run`` to its exit (Ray's start included);
- each stage's wall seconds, from the first to the last line its actors wrote to
  ``<job>/<stage>/monitor/*.jsonl`` (the gaps between stages are the launcher's: Ray, actors);
- ``first reward``: seconds from the start until the RFT stage's first rollout reward point
  (what a browser launch shows first on the run page's reward chart);
- ``cpu``: CPU seconds of ``trinity run`` and of its descendants that were reaped
  (``RUSAGE_CHILDREN``; Ray workers that the raylet leaves unreaped are not in it, so on a
  shared machine compare wall times only with the load beside them);
- the 1-minute load average before, during (min / mean / max, sampled every 2 s) and after;
- held-out greedy accuracy (``eval/arithmetic-eval/accuracy/mean@1``, what
  tests/core/test_demo_learning.py asserts on) at the end of the SFT warmup (the RFT stage's
  step-0 eval), at every later eval, and the lift.

Runs use the installed ``trinity`` (put the checkout's ``.venv/bin`` first on ``PATH`` and the
checkout on ``PYTHONPATH`` to time a work tree).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ACCURACY = "eval/arithmetic-eval/accuracy/mean@1"
REWARD = "rollout/reward/mean"


class LoadSampler(threading.Thread):
    """The 1-minute load average every ``interval`` seconds until ``stop``."""

    def __init__(self, interval: float = 2.0) -> None:
        super().__init__(daemon=True)
        self.interval, self.samples = interval, []
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.interval):
            self.samples.append(os.getloadavg()[0])

    def stop(self) -> dict[str, float]:
        self._done.set()
        self.join()
        s = self.samples or [os.getloadavg()[0]]
        return {"min": min(s), "mean": sum(s) / len(s), "max": max(s)}


def _rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def stage_times(job: Path, start: float) -> dict[str, dict[str, float]]:
    """Each stage's first and last monitor timestamp (seconds after ``start``) and its wall."""
    out = {}
    for stage in sorted(p for p in job.iterdir() if (p / "monitor").is_dir()):
        times = [
            r["time"]
            for f in (stage / "monitor").glob("*.jsonl")
            for r in _rows(f)
            if isinstance(r.get("time"), (int, float))
        ]
        if times:
            first, last = min(times) - start, max(times) - start
            out[stage.name] = {"from_s": first, "to_s": last, "wall_s": last - first}
    return dict(sorted(out.items(), key=lambda kv: kv[1]["from_s"]))


def learning(job: Path, start: float) -> dict[str, Any]:
    """Held-out accuracy per eval step of the stage with an explorer, and its first reward."""
    for stage in job.iterdir():
        rows = _rows(stage / "monitor" / "explorer_metrics.jsonl")
        if not rows:
            continue
        evals = [(r["step"], r[ACCURACY]) for r in rows if ACCURACY in r]
        rewards = [r["time"] - start for r in rows if REWARD in r]
        out: dict[str, Any] = {"stage": stage.name, "evals": evals}
        if rewards:
            out["first_reward_s"] = min(rewards)
        if evals:
            out["sft_end"], out["after_grpo"] = evals[0][1], evals[-1][1]
            out["lift"] = evals[-1][1] - evals[0][1]
        return out
    return {}


def run_path(path: str, config: Path, overrides: list[str]) -> dict[str, Any]:
    """One demo run on kernel path ``path`` ('' = the machine's own) in a fresh directory."""
    work = Path(tempfile.mkdtemp(prefix="demo_time_"))
    env = dict(os.environ, RFT_DEMO_DIR=str(work / "demo"))
    env["TRINITY_CHECKPOINT_ROOT_DIR"] = str(work / "ckpt")
    env.pop("RAY_ADDRESS", None)
    if path:
        env["ATEN_CPU_CAPABILITY"] = path
    try:
        subprocess.run(
            ["trinity", "init-demo", "--out", env["RFT_DEMO_DIR"]],
            env=env,
            check=True,
            capture_output=True,
        )
        before = os.getloadavg()[0]
        sampler = LoadSampler()
        sampler.start()
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.time()
        proc = subprocess.run(
            ["trinity", "run", "--config", str(config), *overrides],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
        )
        total = time.time() - start
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        during = sampler.stop()
        result: dict[str, Any] = {
            "path": path or "machine",
            "returncode": proc.returncode,
            "total_s": total,
            "cpu_s": (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime),
            "load": {"before": before, "during": during, "after": os.getloadavg()[0]},
        }
        if proc.returncode != 0:
            result["stderr_tail"] = proc.stderr[-2000:]
            return result
        (job,) = [p for p in (work / "ckpt").glob("*/*") if p.is_dir()]
        result["stages"] = stage_times(job, start)
        result["learning"] = learning(job, start)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(r: dict[str, Any]) -> str:
    lines = [
        f"path {r['path']}: total {r['total_s']:.0f}s (cpu {r['cpu_s']:.0f}s), rc {r['returncode']}"
    ]
    for name, s in r.get("stages", {}).items():
        lines.append(
            f"  {name:<12} {s['wall_s']:6.0f}s  (from {s['from_s']:.0f}s to {s['to_s']:.0f}s)"
        )
    learned = r.get("learning", {})
    if "first_reward_s" in learned:
        lines.append(f"  first reward point {learned['first_reward_s']:.0f}s after the start")
    if "evals" in learned:
        curve = " -> ".join(f"{acc:.3f}@{step}" for step, acc in learned["evals"])
        lines.append(f"  held-out accuracy {curve}  (lift {learned['lift']:+.3f})")
    load = r["load"]
    d = load["during"]
    lines.append(
        f"  load before {load['before']:.1f}, during {d['min']:.1f}/{d['mean']:.1f}/{d['max']:.1f} "
        f"(min/mean/max), after {load['after']:.1f}"
    )
    if "stderr_tail" in r:
        lines.append(r["stderr_tail"])
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paths", default="", help="ATEN_CPU_CAPABILITY values, comma-separated")
    parser.add_argument("--config", type=Path, default=ROOT / "examples/demo/grpo_demo.yaml")
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    parser.add_argument("overrides", nargs="*", help="key=value overrides for trinity run")
    args = parser.parse_args()
    print(f"cpu cores {os.cpu_count()}, load {os.getloadavg()}", flush=True)
    results = []
    for path in args.paths.split(",") if args.paths else [""]:
        results.append(run_path(path.strip(), args.config.resolve(), args.overrides))
        print(report(results[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    sys.exit(0 if all(r["returncode"] == 0 for r in results) else 1)


if __name__ == "__main__":
    main()
