"""The launch task's part for a fork (``webapp.checkpoints.forks``): before the Ray job starts, the
parent's checkpoint linked into the fork's (stage) job dir as its latest, the stages before it
marked finished (``rft_core.checkpoint.fork.seed_job_dir``). A module of its own because the
launch action (``webapp.runs.actions.start_run``) calls it and the fork action queues through
``actions``: neither imports the other's module back.
"""

from __future__ import annotations

from pathlib import Path

from rft_core.checkpoint.fork import seed_job_dir
from rft_core.errors import CheckpointError
from webapp.errors import ActionError
from webapp.runs.models import Run


def stages_before(config: dict, stage: str) -> list[str]:
    """Names of the stages that run before ``stage``; an error naming ``stages`` when the
    edited config has no such stage (the checkpoint would have nowhere to go)."""
    names = [s.get("stage_name") for s in config.get("stages") or [] if isinstance(s, dict)]
    if not stage:
        if names:
            raise ActionError(
                "the checkpoint is not of a stage, but the config has stages: remove them",
                errors={"stages": f"the checkpoint has no stage; the config names {names}"},
            )
        return []
    if stage not in names:
        raise ActionError(
            f"the checkpoint is of stage {stage!r}, which the config does not have",
            errors={"stages": f"keep a stage named {stage!r} (the config names {names})"},
        )
    return names[: names.index(stage)]


def seed_fork(run: Run, job_dir: Path) -> None:
    """The launch task's part for a fork: the parent's checkpoint linked into the fork's (stage)
    job dir as its latest, the stages before it marked finished. Nothing for other runs."""
    if run.parent_id is None and not run.fork_from_path:
        return
    before = stages_before(run.config, run.fork_stage)
    target = Path(job_dir) / run.fork_stage if run.fork_stage else Path(job_dir)
    if (target / Path(run.fork_from_path).name).exists():
        return  # a second delivery of the launch task
    try:
        seed_job_dir(
            target,
            [Path(run.fork_from_path)],
            forked_from={"run": run.parent_id, "stage": run.fork_stage, "step": run.fork_step},
            finished_stages=before,
        )
    except CheckpointError as err:
        raise ActionError(f"the fork's checkpoint could not be linked in: {err}") from err
