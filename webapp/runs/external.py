"""Runs started outside the dashboard: a terminal's ``trinity run`` that registers itself. Each
function is one action (check, act, write the audit row), as in ``webapp.runs.actions``.

    register_terminal_run(actor, config_yaml=, job_dir=)  -> Run(origin terminal, running)
        ``trinity run`` with RFT_DASHBOARD_URL and RFT_API_TOKEN set calls it through
        ``POST /api/v1/runs/register/`` (``rft_core.monitor.dashboard``), then streams its
        events under the run's key like a dashboard launch; the ingestor does the rest.
    finish_terminal_run(actor, run, exit_code=, message=) -> succeeded | failed | cancelled
        the CLI's report when it exits; a terminal run that never reports is ``lost`` once its
        heartbeats stop (``reconcile_run``).

The other kind, an existing job dir read in with its whole history, is
``webapp.ingest.job_dir.import_job_dir`` (it stores events and reads checkpoints, so it sits
above the runs and checkpoints apps); it makes its run with :func:`new_outside_run` too.

Both kinds go under the actor's experiment named as the config (created when missing). The
job dir must be one the user may claim (``webapp.runs.claims``: inside their runs area or a root
granted to their group, never another user's run's; staff: anywhere inside
``RFT_ALLOWED_PATH_ROOTS``): the dashboard reads its tree and writes converted weights into it.
A refused claim is a 403 with its audit row, checked before anything is written. A terminal run
cannot be cancelled from the dashboard (no Ray job of ours to stop): it is stopped in its
terminal.
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from webapp.accounts.access import check
from webapp.audit.record import Actor, record
from webapp.errors import ActionError
from webapp.experiments.actions import experiment_for_outside_run
from webapp.experiments.config_policy import CheckedConfig, check_config
from webapp.experiments.models import Experiment
from webapp.runs.actions import finish_run
from webapp.runs.claims import claim_job_dir
from webapp.runs.live import publish_run
from webapp.runs.models import FINAL_STATUSES, Run, RunOrigin, RunStatus

EXIT_INTERRUPTED = 130  # the CLI's exit code for Ctrl-C


def require_signed_in(actor: Actor, what: str) -> None:
    """A 403 unless ``actor`` is an active signed-in user (a run from outside has an owner)."""
    if actor.user is None or not actor.user.is_active:
        raise ActionError(f"sign in to {what}", status=403)


def _next_number(experiment: Experiment) -> int:
    locked = Experiment.objects.select_for_update().get(pk=experiment.pk)
    return (locked.runs.aggregate(top=Max("number"))["top"] or 0) + 1


def new_outside_run(actor: Actor, experiment: Experiment, checked: CheckedConfig, **fields) -> Run:
    """A new Run of ``experiment`` (the next number, the experiment's last run) holding
    ``checked``'s config, for a run from outside: a terminal's or an imported job dir's. The
    caller holds the transaction and writes the audit row."""
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
    require_signed_in(actor, "register a run")
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
        run = new_outside_run(
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
