"""An existing job dir read in as a run with its whole history (``POST /runs/import/``,
``POST /api/v1/runs/import/``): the job dir's monitor JSONL, logs and checkpoint tree
(``rft_core.monitor.replay``) become the run's events, metric points, log lines, samples and
checkpoint rows, in ONE transaction: a job dir that cannot be read leaves nothing behind.

    import_job_dir(actor, job_dir=, config_yaml=None, experiment=None) -> Run(origin import)

One action (check, act, write the ``run.import`` audit row). The run goes under the actor's
experiment named as the config (created when missing), or the experiment given, which is a must
when the job dir holds no ``config.yaml`` and no config is given. The job dir must be one the
user may claim (``webapp.runs.claims``); a refused claim is a 403 with its audit row, checked
before anything is written. The run itself is made as a terminal's is
(``webapp.runs.external``); its events are stored as the ingestor stores a stream's
(``webapp.ingest.store``) and its checkpoints read by ``webapp.checkpoints.actions``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from django.db import transaction

from rft_core.checkpoint import layout
from rft_core.monitor.replay import read_job_events
from webapp.accounts.access import check
from webapp.audit.record import Actor, record
from webapp.checkpoints.actions import sync_checkpoints
from webapp.errors import ActionError
from webapp.experiments.actions import experiment_for_outside_run
from webapp.experiments.config_policy import CheckedConfig, canonical_yaml, check_config
from webapp.experiments.models import Experiment
from webapp.ingest.store import rows_of, store_events
from webapp.runs.claims import claim_job_dir
from webapp.runs.external import new_outside_run, require_signed_in
from webapp.runs.live import publish_run
from webapp.runs.models import Run, RunOrigin, RunStatus

IMPORT_BATCH = 2000  # events stored per batch of an import (SQLite caps a query's parameters)


def _import_config(config_yaml: object, job_dir: Path) -> CheckedConfig | None:
    """The given config, else the job dir's ``config.yaml`` (``trinity run`` writes it there),
    else None."""
    if isinstance(config_yaml, str) and config_yaml.strip():
        return check_config(config_yaml=config_yaml, record_only=True)
    found = job_dir / layout.RUN_CONFIG
    if not found.is_file():
        return None
    try:
        return check_config(config_yaml=found.read_text(encoding="utf-8"), record_only=True)
    except ActionError as err:
        raise ActionError(f"{found}: {err}", errors=err.errors) from err


def _unknown_config(job_dir: Path) -> CheckedConfig:
    """What an import without a config records: where the job dir is, nothing more (not a
    config that validates; launching it from the dashboard says what is missing)."""
    data = {"project": job_dir.parent.name, "name": job_dir.name}
    return CheckedConfig(data=data, canonical_yaml=canonical_yaml(data), config=None)


def _final_status(events) -> tuple[str, str]:
    last = next((e for e in reversed(events) if e.kind == "status"), None)
    state = (last.data or {}).get("state") if last is not None else None
    if state == "finished":
        return RunStatus.SUCCEEDED, "imported: the job dir's last status is finished"
    if state == "failed":
        return RunStatus.FAILED, "imported: the job dir's last status is failed"
    return RunStatus.LOST, "imported: the job dir does not record how the run ended"


def import_job_dir(
    actor: Actor,
    *,
    job_dir: object,
    config_yaml: object = None,
    experiment: Experiment | None = None,
) -> Run:
    """A Run holding everything ``job_dir`` recorded (see the module doc)."""
    require_signed_in(actor, "import a job dir")
    claim = claim_job_dir(actor, job_dir, action="run.import")
    path = claim.path
    if not path.is_dir():
        msg = f"{path} is not a directory"
        raise ActionError(f"job_dir: {msg}", errors={"job_dir": msg})
    stages = layout.stage_job_dirs(path)
    if not any(
        (d / "monitor").is_dir() or (d / "log").is_dir() or layout.list_step_dirs(d)
        for _stage, d in stages
    ):
        msg = f"{path} is not a job dir: no monitor/, log/ or global_step_* in it or its stages"
        raise ActionError(f"job_dir: {msg}", errors={"job_dir": msg})
    checked = _import_config(config_yaml, path)
    if experiment is not None:
        check(actor, experiment, "run.import")
    elif checked is None:
        msg = (
            f"{path} holds no config.yaml: give its config (config_yaml), or an experiment of "
            "yours to import it under"
        )
        raise ActionError(f"job_dir: {msg}", errors={"job_dir": msg})
    with transaction.atomic():
        target = experiment or experiment_for_outside_run(actor, checked)
        checked = checked or _unknown_config(path)
        check(actor, target, "run.import")
        run = new_outside_run(
            actor, target, checked, origin=RunOrigin.IMPORT, status=RunStatus.STARTING,
            job_dir=str(path),
        )  # fmt: skip
        found = read_job_events(path, run.key)
        events = found.events
        pairs = [(f"import-{i:09d}", event) for i, event in enumerate(events, start=1)]
        for start in range(0, len(pairs), IMPORT_BATCH):
            store_events(run.key, rows_of(run.key, pairs[start : start + IMPORT_BATCH]))
        status, reason = _final_status(events)
        started = datetime.fromtimestamp(events[0].ts, tz=UTC) if events else None
        finished = datetime.fromtimestamp(events[-1].ts, tz=UTC) if events else None
        Run.objects.filter(pk=run.pk).update(
            status=status, started_at=started, finished_at=finished, exit_reason=reason
        )
        run.refresh_from_db()
        checkpoints = sync_checkpoints(run)
        record(
            actor,
            "run.import",
            run,
            after={
                "experiment": target.pk,
                "number": run.number,
                **claim.audit(),
                "events": len(events),
                "checkpoints": len(checkpoints),
                "skipped_lines": found.skipped,
            },
        )
        publish_run(run)
    run.import_problems = found.problems  # shown once to the importer, not stored
    return run
