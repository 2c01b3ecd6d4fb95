"""A job dir that starts from another run's checkpoint: a fork (W&B's ``fork_from``), or the
checkpoints a bench job evaluates.

    seed_job_dir(fork_job_dir, [parent_step_dir], forked_from={...})   # before the run starts

A fork is a new run whose job dir holds, before it starts, the parent's ``global_step_<k>``
(model, optimizer and extra state, and its Hugging Face weights when it has them) marked as its
latest checkpoint. ``continue_from_checkpoint: true`` then does the rest with the engine's one
resume path (``launcher._resume_step`` -> ``Trainer.start(resume_step=k)`` loads weights,
optimizer and LR schedule; ``in_process.resume_point`` restarts the explorer after step k with
those weights): the fork's first step is k + 1, with whatever hyperparameters its config now
has. The stages before the checkpoint's stage are marked finished in the fork's tree, so a
staged config starts at that stage.

Files are hard links where the filesystem allows (a fork of a 30 GB checkpoint costs no disk;
checkpoint files are written once and replaced by rename, never rewritten in place, so the
parent's and the fork's trees cannot change each other), else copies. ``fork_meta.json`` in the
seeded job dir records where it came from. Standard library only: the dashboard's worker calls it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rft_core.checkpoint.layout import (
    STEP_DIR_RE,
    is_full_checkpoint,
    mark_latest_checkpoint,
    write_json_atomic,
    write_stage_meta,
)
from rft_core.errors import CheckpointError

FORK_META = "fork_meta.json"


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another filesystem, or one without hard links
        shutil.copy2(src, dst)


def check_step_dir(step_path: Path) -> int:
    """The step of ``step_path`` when it is a full ``global_step_<N>`` checkpoint; else a
    CheckpointError naming the directory and what it lacks."""
    step_path = Path(step_path)
    m = STEP_DIR_RE.match(step_path.name)
    if m is None or not step_path.is_dir():
        raise CheckpointError(f"{step_path} is not a global_step_<N> checkpoint directory")
    if not is_full_checkpoint(step_path):
        raise CheckpointError(
            f"{step_path} is not a full checkpoint (a weight-sync directory, or a save that did "
            "not finish): choose a saved checkpoint"
        )
    return int(m.group(1))


def seed_job_dir(
    job_dir: Path,
    step_dirs: Iterable[Path],
    *,
    forked_from: dict[str, Any] | None = None,
    finished_stages: Iterable[str] = (),
) -> list[int]:
    """Link (or copy) each full checkpoint of ``step_dirs`` into ``job_dir`` under its own
    ``global_step_<N>`` name and mark the highest as the latest checkpoint. ``finished_stages``:
    stage names whose job dirs below ``job_dir``'s parent are marked finished (a fork from a
    later stage skips them). Refused (nothing written) when ``job_dir`` already holds a
    checkpoint or a source is not a full checkpoint. Returns the seeded steps, sorted."""
    job_dir = Path(job_dir)
    sources = sorted((check_step_dir(Path(p)), Path(p)) for p in step_dirs)
    if not sources:
        raise CheckpointError("no checkpoint to start from")
    if job_dir.is_dir() and any(STEP_DIR_RE.match(e.name) for e in os.scandir(job_dir)):
        raise CheckpointError(
            f"{job_dir} already holds checkpoints: a fork starts in an empty job dir"
        )
    job_dir.mkdir(parents=True, exist_ok=True)
    for step, src in sources:
        tmp = job_dir / f".global_step_{step}.seeding"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp, copy_function=_link_or_copy, symlinks=True)
        os.replace(tmp, job_dir / src.name)
    steps = [s for s, _ in sources]
    mark_latest_checkpoint(job_dir, steps[-1])
    for stage in finished_stages:
        stage_dir = job_dir.parent / stage
        stage_dir.mkdir(parents=True, exist_ok=True)
        write_stage_meta(
            stage_dir, {"stage_name": stage, "finished": True, "hf_dir": None, "forked": True}
        )
    if forked_from is not None:
        write_json_atomic(job_dir / FORK_META, {**forked_from, "steps": steps})
    return steps
