"""Rows of the demo config that the run, checkpoint, fork and evaluation tests share: the demo's
YAML, an experiment and runs holding it, a full checkpoint on disk, and the audit rows of one
action. (``api_helpers`` makes rows of a minimal config instead, for the API and matrix tests.)"""

from __future__ import annotations

from pathlib import Path

import yaml
from django.conf import settings

from webapp.audit.models import AuditEvent
from webapp.experiments.config_policy import parse_yaml
from webapp.experiments.models import Experiment
from webapp.runs.models import Run, RunStatus

DEMO_YAML = Path(settings.RFT_DEMO_CONFIG).read_text()


def make_experiment(owner, name: str = "demo", text: str = DEMO_YAML) -> Experiment:
    """``owner``'s experiment ``name`` of project demo holding ``text`` (the demo config)."""
    return Experiment.objects.create(
        owner=owner, name=name, project="demo", config_yaml=text, config=parse_yaml(text)
    )


def make_run(experiment, number=1, status=RunStatus.QUEUED, config=None, **fields) -> Run:
    """Run ``number`` of ``experiment`` holding ``config`` (the experiment's when not given)."""
    config = config if config is not None else experiment.config
    return Run.objects.create(
        experiment=experiment,
        number=number,
        status=status,
        config_yaml=yaml.safe_dump(config, sort_keys=False),
        config=config,
        **fields,
    )


def finished_demo_run(owner, runs: Path) -> tuple[Run, Path]:
    """``owner``'s succeeded run #1 of a new demo experiment, its job dir under ``runs`` (the
    ``roots`` fixture's) where the launch task would put it; nothing on disk yet."""
    job_dir = runs / "users" / str(owner.pk) / "checkpoints" / "run-1" / "demo" / "grpo_demo"
    run = make_run(make_experiment(owner), status=RunStatus.SUCCEEDED, job_dir=str(job_dir))
    return run, job_dir


def full_checkpoint(job_dir: Path, step: int) -> Path:
    """A full checkpoint of ``step`` in a stage's ``job_dir`` as the trainer leaves it: the
    actor's weights file and the ``.full_checkpoint`` mark."""
    step_dir = job_dir / f"global_step_{step}"
    (step_dir / "actor").mkdir(parents=True)
    (step_dir / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"weights of step %d" % step)
    (step_dir / ".full_checkpoint").touch()
    return step_dir


def audit(action: str) -> list[AuditEvent]:
    """The audit rows of ``action``, oldest first."""
    return list(AuditEvent.objects.filter(action=action).order_by("id"))
