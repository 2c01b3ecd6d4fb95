"""Runs started outside the dashboard: a terminal's ``trinity run`` that registers itself, and
an existing job dir read in with its whole history. Each function is one action (check, act,
write the audit row), as in ``webapp.runs.actions``.

    register_terminal_run(actor, config_yaml=, job_dir=)  -> Run(origin terminal, running)
        ``trinity run`` with RFT_DASHBOARD_URL and RFT_API_TOKEN set calls it through
        ``POST /api/v1/runs/register/`` (``rft_core.monitor.dashboard``), then streams its
        events under the run's key like a dashboard launch; the ingestor does the rest.
    finish_terminal_run(actor, run, exit_code=, message=) -> succeeded | failed | cancelled
        the CLI's report when it exits; a terminal run that never reports is ``lost`` once its
        heartbeats stop (``reconcile_run``).
    import_job_dir(actor, job_dir=, config_yaml=None, experiment=None) -> Run(origin import)
        the job dir's monitor JSONL, logs and checkpoint tree (``rft_core.monitor.replay``)
        become the run's events, metric points, log lines, samples and checkpoint rows, in ONE
        transaction: a job dir that cannot be read leaves nothing behind.

Both kinds go under the actor's experiment named as the config (created when missing); an
import may name the experiment instead, and must when the job dir holds no ``config.yaml``
and no config is given. The
job dir must be one the user may claim (``webapp.runs.claims``: inside their runs area or a root
granted to their group, never another user's run's; staff: anywhere inside
``RFT_ALLOWED_PATH_ROOTS``): the dashboard reads its tree and writes converted weights into it.
A refused claim is a 403 with its audit row, checked before anything is written. A terminal run cannot be cancelled from the dashboard (no Ray job
of ours to stop): it is stopped in its terminal.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from rft_core.checkpoint import layout
from rft_core.monitor.replay import read_job_events
from webapp.accounts.access import check
from webapp.audit.record import Actor, record
from webapp.checkpoints.actions import sync_checkpoints
from webapp.errors import ActionError
from webapp.events.store import rows_of, store_events
from webapp.experiments.actions import experiment_for_outside_run
from webapp.experiments.config_policy import CheckedConfig, canonical_yaml, check_config
from webapp.experiments.models import Experiment
from webapp.runs.actions import finish_run
from webapp.runs.claims import claim_job_dir
from webapp.runs.live import publish_run
from webapp.runs.models import FINAL_STATUSES, Run, RunOrigin, RunStatus

IMPORT_BATCH = 2000  # events stored per batch of an import (SQLite caps a query's parameters)
EXIT_INTERRUPTED = 130  # the CLI's exit code for Ctrl-C


def _signed_in(actor: Actor, what: str) -> None:
    if actor.user is None or not actor.user.is_active:
        raise ActionError(f"sign in to {what}", status=403)


def _next_number(experiment: Experiment) -> int:
    locked = Experiment.objects.select_for_update().get(pk=experiment.pk)
    return (locked.runs.aggregate(top=Max("number"))["top"] or 0) + 1


def _new_run(actor: Actor, experiment: Experiment, checked: CheckedConfig, **fields) -> Run:
    run = Run.objects.create(
        experiment=experiment,
        number=_next_number(experiment),
        config_yaml=checked.canonical_yaml,
        config=checked.data,
        launched_by=actor.user,
        **fields,
    )
    Experiment.objects.filter(pk=experiment.pk).update(last_run=run)
    return run


# ---------------------------------------------------------------- a terminal's trinity run


def register_terminal_run(actor: Actor, *, config_yaml: object, job_dir: object) -> Run:
    """A running Run for a ``trinity run`` started in a terminal (its config as it resolved it,
    its job dir); the CLI then streams under ``run.key``."""
    _signed_in(actor, "register a run")
    if not isinstance(config_yaml, str) or not config_yaml.strip():
        msg = "required: the run's config as YAML text"
        raise ActionError(f"config_yaml: {msg}", errors={"config_yaml": msg})
    checked = check_config(config_yaml=config_yaml, record_only=True)
    claim = claim_job_dir(actor, job_dir, action="run.register")
    path = claim.path
    with transaction.atomic():
        experiment = experiment_for_outside_run(actor, checked)
        check(actor, experiment, "run.register")
        now = timezone.now()
        run = _new_run(
            actor,
            experiment,
            checked,
            origin=RunOrigin.TERMINAL,
            status=RunStatus.RUNNING,
            job_dir=str(path),
            started_at=now,
            last_heartbeat=now,  # the heartbeat clock starts now: silence means lost
        )
        record(
            actor,
            "run.register",
            run,
            after={"experiment": experiment.pk, "number": run.number, **claim.audit()},
        )
        publish_run(run)
    return run


def events_redis_url() -> str:
    """The Redis a registered run streams to (``RFT_EVENTS_REDIS_URL`` for the CLI)."""
    return settings.RFT_EVENTS_REDIS_URL


def finish_terminal_run(actor: Actor, run: Run, *, exit_code: object, message: object = "") -> Run:
    """The CLI's report at exit: 0 succeeded, 130 (Ctrl-C) cancelled, anything else failed
    with ``message`` as the last error. A run that already ended is left as it is."""
    check(actor, run, "run.finish")
    if run.origin != RunOrigin.TERMINAL:
        raise ActionError(
            f"run #{run.number} was not started from a terminal; its status follows its job",
            status=409,
        )
    if isinstance(exit_code, bool) or not isinstance(exit_code, int):
        msg = f"an integer exit code, got {exit_code!r}"
        raise ActionError(f"exit_code: {msg}", errors={"exit_code": msg})
    text = str(message or "")[:2000]
    if run.status in FINAL_STATUSES:
        return run
    record(actor, "run.finish", run, after={"exit_code": exit_code})
    if exit_code == 0:
        finish_run(run, RunStatus.SUCCEEDED, "trinity run exited 0 in its terminal")
    elif exit_code == EXIT_INTERRUPTED:
        finish_run(run, RunStatus.CANCELLED, "interrupted in its terminal (Ctrl-C)")
    else:
        reason = f"trinity run exited {exit_code} in its terminal"
        finish_run(run, RunStatus.FAILED, reason, last_error=text)
    run.refresh_from_db()
    return run


# ---------------------------------------------------------------- an existing job dir


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
    _signed_in(actor, "import a job dir")
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
        run = _new_run(
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
