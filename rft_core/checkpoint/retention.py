"""Checkpoint retention: which full checkpoints of a (stage's) job dir are kept, and pins that
keep a checkpoint in use from being deleted. Torch-free (the web process reads pins too).

``trainer.max_checkpoints_to_keep: N`` (Trinity's name; verl's ``max_actor_ckpt_to_keep`` /
``max_ckpt_to_keep`` inside ``trainer.trainer_config.trainer`` are read as it) keeps the newest N
full checkpoints of each stage; ``trainer.best_checkpoint_metric`` also keeps the one step whose
value of that metric (an eval metric such as ``eval/<taskset>/accuracy/mean@1``, read from the
stage's ``monitor/*_metrics.jsonl``) is the best (``best_checkpoint_mode``: max or min). An eval
at explorer step S measured the weights of trainer step S (one model version a step), so the
value at S is the checkpoint ``global_step_S``'s; steps with no checkpoint are skipped.

The best is re-decided as evals arrive: the trainer prunes after each save, and the explorer
prunes again after each eval (both through :func:`prune_as_configured`), because the eval of step S is written
after ``global_step_S`` was saved (the closing eval of the last step always is). So a run ends
with exactly the newest N plus the best by every eval it logged (the newest N alone when the
best is among them), not with a best decided before the last evals came.

Never deleted, whatever N says:

- a checkpoint being written: it is a ``.global_step_N.tmp-*`` dir until complete, and only
  dirs with the full-checkpoint marker are listed (a trainer and an explorer pruning the same
  job dir at once never see it);

- the step ``latest_checkpointed_iteration.txt`` names (what a resume of this job dir loads);
- a pinned step: ``global_step_N/.pins/<holder>`` exists while a process loads it to resume or
  fork from it, or converts it (:func:`pinned_step`). A pin whose process is gone (same host,
  pid not alive) no longer counts, so a killed converter does not keep a step forever.

Semantics as verl's ``max_ckpt_to_keep``: None, 0 or a negative N keeps everything.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rft_core.checkpoint.layout import (
    full_checkpoints,
    latest_checkpoint_step,
    step_dir,
)

PINS_DIR = ".pins"
BEST_MODES = ("max", "min")


def _pin_alive(pin: Path) -> bool:
    try:
        holder = json.loads(pin.read_text())
    except (OSError, ValueError):
        return True  # being written: count it
    if holder.get("host") != socket.gethostname():
        return True  # another node's process: we cannot tell, keep it
    pid = int(holder.get("pid") or 0)
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pins_of(step_path: Path) -> list[str]:
    """Names of the live pins of ``step_path`` (``"convert-1234"``, ``"resume-99"``)."""
    pins = Path(step_path) / PINS_DIR
    if not pins.is_dir():
        return []
    return sorted(p.name for p in pins.iterdir() if p.is_file() and _pin_alive(p))


@contextmanager
def pinned_step(step_path: Path, reason: str) -> Iterator[Path]:
    """Keep ``step_path`` from being pruned while the body runs (``reason``: convert, resume,
    fork, ...). A missing step dir is not created: there is nothing to protect."""
    step_path = Path(step_path)
    pin = step_path / PINS_DIR / f"{reason}-{os.getpid()}-{id(step_path)}"
    if step_path.is_dir():
        pin.parent.mkdir(exist_ok=True)
        pin.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    try:
        yield step_path
    finally:
        pin.unlink(missing_ok=True)


def metric_by_step(job_dir: Path, metric: str) -> dict[int, float]:
    """``{step: value}`` of ``metric`` in the job dir's ``monitor/*_metrics.jsonl`` (the last
    value written for a step wins; non-finite values are left out)."""
    values: dict[int, float] = {}
    for path in sorted((Path(job_dir) / "monitor").glob("*_metrics.jsonl")):
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                if metric not in line:
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    continue  # a line being written
                value, step = row.get(metric), row.get("step")
                if isinstance(value, int | float) and step is not None and math.isfinite(value):
                    values[int(step)] = float(value)
    return values


def best_checkpoint_step(job_dir: Path, metric: str, mode: str = "max") -> int | None:
    """The full checkpoint's step whose ``metric`` value is best (ties: the earlier step)."""
    if not metric:
        return None
    steps = {s for s, _ in full_checkpoints(Path(job_dir))}
    scored = [(v, s) for s, v in metric_by_step(job_dir, metric).items() if s in steps]
    if not scored:
        return None
    sign = -1.0 if mode == "max" else 1.0
    return min(scored, key=lambda vs: (sign * vs[0], vs[1]))[1]


def prune_checkpoints(
    job_dir: Path,
    max_to_keep: int | None,
    *,
    best_metric: str = "",
    best_mode: str = "max",
    keep: Collection[int] = (),
) -> list[int]:
    """Delete the full checkpoints of ``job_dir`` but the newest ``max_to_keep``, the best by
    ``best_metric``, the latest (resume) step, pinned steps and ``keep``. Returns the steps
    deleted (whole ``global_step_N`` dirs)."""
    if not max_to_keep or max_to_keep <= 0:
        return []
    job_dir = Path(job_dir)
    full = [s for s, _ in full_checkpoints(job_dir)]
    protected = set(keep) | set(full[-max_to_keep:])
    protected.add(latest_checkpoint_step(job_dir))
    protected.add(best_checkpoint_step(job_dir, best_metric, best_mode))
    removed = []
    for s in full:
        path = step_dir(job_dir, s)
        if s in protected or pins_of(path):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(s)
    return removed


def prune_as_configured(job_dir: Path, trainer: Any) -> list[int]:
    """:func:`prune_checkpoints` with a config's ``trainer`` section (``max_checkpoints_to_keep``,
    ``best_checkpoint_metric``, ``best_checkpoint_mode``): the trainer's after each save, the
    explorer's after each eval (the best re-decided with it)."""
    return prune_checkpoints(
        job_dir,
        trainer.max_checkpoints_to_keep,
        best_metric=trainer.best_checkpoint_metric,
        best_mode=trainer.best_checkpoint_mode,
    )


__all__ = [
    "BEST_MODES",
    "PINS_DIR",
    "best_checkpoint_step",
    "metric_by_step",
    "pinned_step",
    "pins_of",
    "prune_as_configured",
    "prune_checkpoints",
]
