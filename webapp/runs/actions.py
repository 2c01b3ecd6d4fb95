"""Every change of a run's state: launch, cancel, reconcile, and what the event ingestor observes.

User actions (``launch_run``, ``cancel_run``) check permission, act and write one audit row;
``queue_run`` is the one way a run is queued (a launch here, a fork in
``webapp.checkpoints.forks``); the Celery tasks in ``tasks.py`` call the ``start_run`` /
``stop_run`` / ``follow_run`` halves, which talk to Ray through ``ray_jobs`` (never
``ray.init()``).

    queued --start_run--> starting --first heartbeat / "running" status--> running
    starting | running --the Ray job ends--> succeeded | failed | cancelled
    starting | running --job unknown to Ray, or heartbeat older than RFT_HEARTBEAT_TIMEOUT_S--> lost
    queued --cancel_run--> cancelled (never submitted)

The database follows the Ray job, which is the truth about a run: ``follow_run`` polls a run's
job until it ends, ``reconcile_runs`` (Celery beat, and when a worker starts) sweeps every live
run, so no run stays "running" after its job died. A final status change made by the system is
audited as ``run.status``, and tells the apps above this one (``signals.run_finished``: the
checkpoints app then reads the job dir's tree). Every change of a run's state is pushed to the
live pages with ``webapp.runs.live.publish_run`` (sent once the change commits).
"""

from __future__ import annotations

import logging
import os
import shlex
import uuid
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatch

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from rft_core.monitor import ENV_REDIS_PREFIX, ENV_REDIS_URL, ENV_RUN_ID
from rft_core.plugins import ENV_PLUGIN_DIRS
from webapp.accounts.access import check
from webapp.audit.record import Actor, record
from webapp.celery import app as celery_app
from webapp.errors import ActionError
from webapp.experiments.config_policy import CheckedConfig, check_config, config_paths
from webapp.experiments.models import Experiment
from webapp.health.checks import check_ray, check_redis
from webapp.runs import ray_jobs
from webapp.runs.claims import Claim, claim_job_dir, path_refusal, refusal, refuse, runs_area
from webapp.runs.fork_seed import seed_fork
from webapp.runs.live import publish_run
from webapp.runs.models import ACTIVE_STATUSES, FINAL_STATUSES, Run, RunOrigin, RunStatus
from webapp.runs.signals import run_finished
from webapp.runs.snapshot import LaunchSpec, checkpoint_root, launch_spec
from webapp.runs.stage_actions import enter_stage, observe_phase, observe_progress

log = logging.getLogger(__name__)

LIVE = (RunStatus.STARTING, RunStatus.RUNNING)


# ---------------------------------------------------------------- launch


def launch_run(actor: Actor, experiment: Experiment) -> Run:
    """Run(queued) of ``experiment`` with its config as it is now; the launch task is enqueued
    once the row is committed. Refused (nothing written) when the config no longer passes the
    checks, or when Redis or Ray's job server does not answer."""
    check(actor, experiment, "run.launch")
    checked = check_config(config_yaml=experiment.config_yaml)
    run = queue_run(actor, experiment, checked, action="run.launch")
    experiment.last_run = run
    return run


def queue_run(
    actor: Actor,
    experiment: Experiment,
    checked: CheckedConfig,
    *,
    action: str,
    version: int | None = None,
    audit: dict | None = None,
    **fields,
) -> Run:
    """The one way a run is queued (a launch, a fork): its paths claimed, Redis and Ray asked,
    then in one transaction Run(queued) numbered after the experiment's last run, the
    experiment's ``last_run``, the ``action`` audit row (``audit`` added to its ``after``) and the
    launch task enqueued on commit. ``version``: the experiment version the config is of (the
    current one when None); ``fields``: more columns of the row (a fork's parent and step).
    The caller has checked the actor's permission."""
    claim = _claim_launch_paths(actor, experiment, checked)
    require_services()
    task_id = str(uuid.uuid4())
    with transaction.atomic():
        locked = Experiment.objects.select_for_update().get(pk=experiment.pk)
        number = (locked.runs.aggregate(top=Max("number"))["top"] or 0) + 1
        version = locked.version if version is None else version
        run = Run.objects.create(
            experiment=locked,
            number=number,
            status=RunStatus.QUEUED,
            config_yaml=checked.canonical_yaml,
            config=checked.data,
            experiment_version=version,
            launched_by=actor.user,
            celery_task_id=task_id,
            **fields,
        )
        Experiment.objects.filter(pk=locked.pk).update(last_run=run)
        after = {"experiment": locked.pk, "number": number, "version": version, **(audit or {})}
        after |= {"checkpoint_root": str(claim.path), "claim": claim.basis}
        record(actor, action, run, after=after)
        transaction.on_commit(lambda: _enqueue_launch(run, task_id))
        publish_run(run)
    return run


def _claim_launch_paths(actor: Actor, experiment: Experiment, checked: CheckedConfig) -> Claim:
    """The run's job dir goes under the config's checkpoint root (a relative one in the runs
    area of the experiment's owner): that root must be one the launching user may claim
    (``webapp.runs.claims``), and no other path of the config may lie in another user's runs
    area (or, for an experience buffer the run writes, in another user's run's job dir).
    Refused: 403 naming the rule and the YAML path, audited, nothing written."""
    area = runs_area(experiment.owner)
    root = checkpoint_root(checked.config.checkpoint_root_dir, area)
    claim = claim_job_dir(
        actor,
        str(root),
        action="run.launch",
        field="checkpoint_root_dir",
        what="checkpoint root",
        target=experiment,
        below=False,
    )
    for path in config_paths(checked.config, area):
        if path.why or path.where == "checkpoint_root_dir":
            continue
        writes = "experience_buffer" in path.where
        if rule := path_refusal(actor.user, path.real, writes=writes):
            message = f"{path.where}: {rule}"
            raise refuse(
                actor, "run.launch", message, field=path.where, path=path.real, target=experiment
            )
    return claim


def _start_refusal(run: Run, spec: LaunchSpec) -> str:
    """Why the run may not write its run root after all (another user's run took it or a
    parent of it since the launch); "" when it may."""
    user = run.launched_by or run.experiment.owner
    _, rule = refusal(user, str(spec.run_root), what="run root", placed_by_dashboard=True)
    return rule


def require_services() -> None:
    """409 naming the service that does not answer (the run would never start)."""
    redis_status = check_redis()
    if not redis_status.up:
        raise ActionError(
            f"cannot launch: the Celery broker (Redis) is down: {redis_status.detail}", status=409
        )
    url = ray_jobs.job_server_url()
    ray_status = check_ray(url)
    if not ray_status.up:
        raise ActionError(f"cannot launch: {ray_jobs.unreachable_hint(url)}", status=409)


def _enqueue_launch(run: Run, task_id: str) -> None:
    from kombu.exceptions import OperationalError

    try:
        celery_app.send_task(
            "runs.launch", args=(run.pk,), task_id=task_id, queue=settings.RFT_RUNS_QUEUE
        )
    except OperationalError as err:  # the broker went away since require_services
        finish_run(run, RunStatus.FAILED, f"could not enqueue the launch (Redis: {err})")


def submission_id_of(run: Run) -> str:
    return f"rft-{run.key}"


def start_run(run_id: int) -> Run:
    """The launch task: write the run's launch config into its own directory and submit
    ``trinity run --config <it>`` as a Ray job. A run cancelled while queued is left alone; a
    run whose config or submission fails becomes failed with the reason."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.status != RunStatus.QUEUED:
            return run  # cancelled while queued (or a second delivery of this task)
        try:
            checked = check_config(config=run.config)
            spec = launch_spec(
                checked.data, checked.config, run.pk, runs_area(run.experiment.owner)
            )
            if rule := _start_refusal(run, spec):
                raise ActionError(rule, status=403)
            spec.write()
            seed_fork(run, spec.job_dir)  # a fork's job dir starts with its parent's checkpoint
        except (ActionError, OSError) as err:
            reason = getattr(err, "message", None) or str(err)
            finish_run(run, RunStatus.FAILED, f"the run's config could not be prepared: {reason}")
            return run
        run.status = RunStatus.STARTING
        run.job_dir = str(spec.job_dir)
        run.save(update_fields=["status", "job_dir"])
        publish_run(run)
    sid = submission_id_of(run)
    try:
        ray_jobs.submit(
            entrypoint=f"{settings.RFT_TRINITY_COMMAND} run --config {shlex.quote(str(spec.config_path))}",
            submission_id=sid,
            runtime_env=runtime_env_of(run),
            metadata={
                "rft_run": run.pk,
                "rft_run_key": run.key,
                "experiment": run.experiment_id,
                "number": run.number,
            },
        )
    except Exception as err:  # noqa: BLE001 - whatever refused the job, the run says why
        finish_run(run, RunStatus.FAILED, f"the Ray job could not be submitted: {err}")
        return run
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        run.submission_id = sid
        run.save(update_fields=["submission_id"])
        stop_now = run.status == RunStatus.CANCELLED or run.cancel_requested_at is not None
    if stop_now:  # cancelled while we were submitting
        _stop_job(run)
    return run


def runtime_env_of(run: Run) -> dict:
    """The job's runtime_env: ``RFT_RAY_RUNTIME_ENV`` plus the env vars that switch the
    monitor's Redis sink on for this run (with the deployment's prefix), the deployment's ``RFT_PLUGIN_DIRS``, and the allow-listed ``${oc.env:...}`` variables the
    worker has (so the job resolves them as the launch checks did)."""
    env = dict(settings.RFT_RAY_RUNTIME_ENV)
    env_vars = {
        name: value
        for name, value in os.environ.items()
        if any(fnmatch(name, pattern) for pattern in settings.RFT_OC_ENV_ALLOWLIST)
    }
    env_vars.update(env.get("env_vars") or {})
    env_vars.update(
        {
            ENV_REDIS_URL: settings.REDIS_URL,
            ENV_REDIS_PREFIX: settings.RFT_REDIS_PREFIX,
            ENV_RUN_ID: run.key,
            "PYTHONUNBUFFERED": "1",
            # the deployment's plugins only, never whatever the worker's environment holds
            ENV_PLUGIN_DIRS: os.pathsep.join(settings.RFT_PLUGIN_DIRS),
        }
    )
    env["env_vars"] = env_vars
    return env


# ---------------------------------------------------------------- cancel


def cancel_run(actor: Actor, run: Run) -> Run:
    """A queued run is cancelled at once (it never submits); a starting or running one gets
    ``cancel_requested_at`` and a task stops its Ray job, waits until it stopped, and marks it
    cancelled. Refused (409) for a run that already ended."""
    check(actor, run, "run.cancel")
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if run.status in FINAL_STATUSES:
            raise ActionError(f"run #{run.number} has already {run.status}", status=409)
        if run.origin != RunOrigin.DASHBOARD:
            raise ActionError(
                f"run #{run.number} was started from a terminal, not by the dashboard: stop it "
                "there (Ctrl-C); the dashboard has no job of its own to stop",
                status=409,
            )
        before = {"status": run.status}
        if run.status == RunStatus.QUEUED:
            run.status = RunStatus.CANCELLED
            run.finished_at = timezone.now()
            run.exit_reason = f"cancelled by {actor.name} before it started"
            run.save(update_fields=["status", "finished_at", "exit_reason"])
        elif run.cancel_requested_at is None:
            run.cancel_requested_at = timezone.now()
            run.save(update_fields=["cancel_requested_at"])
            transaction.on_commit(lambda: _enqueue_cancel(run))
        else:
            return run  # already being cancelled
        record(actor, "run.cancel", run, before=before, after={"status": run.status})
        publish_run(run)
    return run


def _enqueue_cancel(run: Run) -> None:
    celery_app.send_task("runs.cancel", args=(run.pk,), queue=settings.RFT_RUNS_QUEUE)


def stop_run(run_id: int) -> Run:
    """The cancel task: stop the run's Ray job, wait until Ray reports it ended, settle."""
    run = Run.objects.get(pk=run_id)
    if run.status in FINAL_STATUSES:
        return run
    if not run.submission_id:
        # start_run is submitting right now: cancelled here, it stops the job it submitted
        finish_run(run, RunStatus.CANCELLED, _cancel_reason(run))
        return run
    _stop_job(run)
    return Run.objects.get(pk=run_id)


def _stop_job(run: Run) -> None:
    try:
        state = ray_jobs.stop(run.submission_id, timeout_s=settings.RFT_CANCEL_TIMEOUT_S)
    except ray_jobs.JobNotFound:
        finish_run(run, RunStatus.CANCELLED, _cancel_reason(run))
        return
    except ray_jobs.RayJobsError as err:
        # Ray down or the job will not stop: reconcile settles it once Ray answers again
        log.warning("run %s: could not stop Ray job %s: %s", run.pk, run.submission_id, err)
        Run.objects.filter(pk=run.pk).update(last_error=f"cancel: {err}"[:2000])
        return
    _settle(run, state)


def _cancel_reason(run: Run) -> str:
    return f"cancelled by {_canceller(run)}"


def _canceller(run: Run) -> str:
    from webapp.audit.models import AuditEvent

    row = (
        AuditEvent.objects.filter(action="run.cancel", target_type="run", target_id=str(run.pk))
        .order_by("-id")
        .values_list("actor_name", flat=True)
        .first()
    )
    return row or "a user"


# ---------------------------------------------------------------- following the Ray job


def follow_run(run_id: int) -> bool:
    """One poll of a live run's Ray job (the follow task repeats it); True while it is live."""
    run = Run.objects.get(pk=run_id)
    reconcile_run(run)
    return Run.objects.filter(pk=run_id, status__in=ACTIVE_STATUSES).exists()


def reconcile_runs(actor: Actor = Actor.system()) -> list[Run]:  # noqa: B008 - frozen, shared
    """Settle every starting/running run against its Ray job and its heartbeat; returns the
    runs whose status changed. (The changes are audited as the system's ``run.status``.)"""
    changed = []
    for run in Run.objects.filter(status__in=LIVE).select_related("experiment"):
        if reconcile_run(run):
            changed.append(Run.objects.get(pk=run.pk))
    return changed


def reconcile_run(run: Run) -> bool:
    """Compare one run with its Ray job; True when its status changed."""
    if run.status not in LIVE:
        return False
    now = timezone.now()
    timeout = timedelta(seconds=settings.RFT_HEARTBEAT_TIMEOUT_S)
    if run.origin != RunOrigin.DASHBOARD:
        return _heartbeat_lost(run, now, timeout)  # no Ray job of ours: heartbeats only
    if not run.submission_id:
        if now - run.created > max(timeout, timedelta(minutes=5)):
            return finish_run(
                run,
                RunStatus.FAILED,
                "the launch task stopped before it submitted the Ray job (worker restarted?)",
            )
        return False
    try:
        state = ray_jobs.status(run.submission_id)
    except ray_jobs.JobNotFound:
        return finish_run(
            run,
            RunStatus.LOST,
            f"Ray does not know job {run.submission_id}: the Ray head was restarted (or the job "
            "deleted) while the run was live",
        )
    except ray_jobs.RayJobsError as err:
        state = None  # Ray down: nothing known about the job; the heartbeat rule still applies
        log.info("reconcile run %s: %s", run.pk, err)
    if state is not None and state.terminal:
        return _settle(run, state)
    requested = run.cancel_requested_at
    if (
        state is not None
        and requested
        and now - requested > timedelta(seconds=2 * settings.RFT_CANCEL_TIMEOUT_S)
    ):
        _stop_job(run)  # the cancel task was lost (worker restarted): stop it from here
        return Run.objects.filter(pk=run.pk, status__in=FINAL_STATUSES).exists()
    return _heartbeat_lost(run, now, timeout)


def _heartbeat_lost(run: Run, now: datetime, timeout: timedelta) -> bool:
    """A running run whose last heartbeat is older than ``timeout`` is lost."""
    if (
        run.status == RunStatus.RUNNING
        and run.last_heartbeat
        and now - run.last_heartbeat > timeout
    ):
        age = (now - run.last_heartbeat).total_seconds()
        return finish_run(
            run,
            RunStatus.LOST,
            f"no heartbeat for {age:.0f} s (last at {run.last_heartbeat:%H:%M:%S} UTC; "
            f"RFT_HEARTBEAT_TIMEOUT_S={settings.RFT_HEARTBEAT_TIMEOUT_S:g})",
        )
    return False


def _settle(run: Run, state: ray_jobs.JobState) -> bool:
    """The final status of ``run`` from its ended Ray job."""
    if state.status == "SUCCEEDED":
        return finish_run(run, RunStatus.SUCCEEDED, "the Ray job finished successfully")
    cancel_requested = Run.objects.filter(pk=run.pk, cancel_requested_at__isnull=False).exists()
    if state.status == "STOPPED":
        if cancel_requested:
            return finish_run(run, RunStatus.CANCELLED, _cancel_reason(run))
        return finish_run(run, RunStatus.FAILED, "the Ray job was stopped outside RFT Studio")
    return finish_run(
        run, RunStatus.FAILED, _exit_reason(state), last_error=_last_error(run, state)
    )


def _exit_reason(state: ray_jobs.JobState) -> str:
    code = state.exit_code
    if code is not None and code < 0:
        return f"the job's driver was killed by signal {-code} (exit code {code})"
    if code is not None and 128 < code < 160:  # a shell reporting its child's signal
        return f"the job's driver was killed by signal {code - 128} (exit code {code})"
    if code is not None:
        return f"trinity run exited with code {code}"
    first = state.message.splitlines()[0] if state.message else state.error_type or "failed"
    return f"the Ray job failed: {first.split(', last available logs')[0]}"[:300]


def _last_error(run: Run, state: ray_jobs.JobState) -> str:
    try:
        text = ray_jobs.logs(run.submission_id)
    except ray_jobs.RayJobsError:
        text = state.message
    return ray_jobs.last_error_line(text)


def finish_run(run: Run, status: str, reason: str, *, last_error: str = "") -> bool:
    """Move ``run`` to the final ``status`` (unless it already ended); audited as run.status."""
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.status in FINAL_STATUSES:
            return False
        before = locked.status
        locked.status = status
        locked.finished_at = timezone.now()
        locked.exit_reason = reason[:300]
        if last_error and not locked.last_error:
            locked.last_error = last_error
        locked.save(update_fields=["status", "finished_at", "exit_reason", "last_error"])
        record(
            Actor.system(),
            "run.status",
            locked,
            before={"status": before},
            after={"status": status, "exit_reason": locked.exit_reason},
        )
        publish_run(locked)
    run.status, run.finished_at, run.exit_reason = status, locked.finished_at, locked.exit_reason
    run.last_error = locked.last_error
    # the checkpoints app reads the job dir's tree now (rows of checkpoints whose events never
    # arrived): webapp.checkpoints.receivers
    run_finished.send(sender=Run, run=locked)
    return True


# ---------------------------------------------------------------- what the ingestor observes


def _at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def observe_heartbeat(run: Run, ts: float) -> None:
    """A heartbeat of the run's monitor: the run is alive (starting -> running; a run lost only
    for want of heartbeats is running again)."""
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        at = _at(ts)
        if locked.last_heartbeat is None or at > locked.last_heartbeat:
            locked.last_heartbeat = at
        fields = ["last_heartbeat"]
        if locked.status == RunStatus.STARTING:
            locked.status = RunStatus.RUNNING
            locked.started_at = locked.started_at or at
            fields += ["status", "started_at"]
        elif (
            locked.status == RunStatus.LOST
            and locked.exit_reason.startswith("no heartbeat")
            and locked.finished_at is not None
            and at > locked.finished_at
        ):
            locked.status, locked.finished_at, locked.exit_reason = RunStatus.RUNNING, None, ""
            fields += ["status", "finished_at", "exit_reason"]
            record(
                Actor.system(),
                "run.status",
                locked,
                before={"status": RunStatus.LOST},
                after={"status": RunStatus.RUNNING, "exit_reason": "heartbeats resumed"},
            )
        locked.save(update_fields=fields)
        publish_run(locked)


def observe_status(run: Run, state: str, message: str, ts: float, stage: str = "") -> None:
    """A role's status event (``running`` / ``finished`` / ``failed``, see rft_core's explorer
    and trainer). ``running`` starts the run; ``failed`` keeps the role's message as the last
    error. The final status comes from the Ray job (a stage finishing is not the run)."""
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        fields = []
        if state == "running" and locked.status == RunStatus.STARTING:
            locked.status = RunStatus.RUNNING
            locked.started_at = locked.started_at or _at(ts)
            fields += ["status", "started_at"]
        if state == "failed" and message:
            locked.last_error = message[:2000]
            fields.append("last_error")
        if stage and state == "running" and locked.stage != stage:
            fields += enter_stage(locked, stage)
        if fields:
            locked.save(update_fields=fields)
            publish_run(locked)


def elapsed(run: Run) -> float | None:
    """Seconds from start (or creation) to finish (or now)."""
    start = run.started_at or run.created
    if start is None:
        return None
    end = run.finished_at or timezone.now()
    return max(0.0, (end - start).total_seconds())


__all__ = [
    "cancel_run",
    "elapsed",
    "follow_run",
    "launch_run",
    "enter_stage",
    "observe_heartbeat",
    "observe_phase",
    "observe_progress",
    "observe_status",
    "reconcile_run",
    "reconcile_runs",
    "start_run",
    "stop_run",
]
