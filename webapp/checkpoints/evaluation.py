"""Evaluate chosen checkpoints of a run on chosen eval tasksets: Trinity's ``mode: bench``.

    evaluate_checkpoints(actor, run, checkpoints, tasksets)  # the user's action, audited
    start_evaluation(pk)      # the Celery task: seed the job dir, submit the bench Ray job
    follow_evaluation(pk)     # the Celery task, repeated: poll the job, then read the results
    accuracy_table(evaluation) -> EvaluationTable              # the page's checkpoint x taskset

Each row also shows the run's own eval logged at the checkpoint's step, and when the two
differ, why (``difference_note``): the run's eval measured another model version (it logs the
one it measured), or, the same weights, a sampling temperature above 0.

The bench job is the run's config with ``mode: bench``, no stages, the chosen
``buffer.explorer_input.eval_tasksets`` and a job dir of its own, ``<root>/run-eval-<pk>/...``,
into which the chosen ``global_step_<N>`` are hard-linked (``rft_core.checkpoint.fork``); the
engine's bench evaluates every checkpoint of its job dir in order and logs
``bench/<taskset>/accuracy/mean@k`` at each step to ``monitor/explorer_metrics.jsonl``, which
is read back when the job ends. The job streams nothing to the run's live page (its monitor has
no run id): the bench metrics are the evaluation's, not the run's.
"""

from __future__ import annotations

import json
import logging
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rft_core.checkpoint.fork import seed_job_dir
from rft_core.checkpoint.layout import is_full_checkpoint
from rft_core.errors import CheckpointError
from rft_core.monitor import ENV_REDIS_PREFIX, ENV_REDIS_URL, ENV_RUN_ID
from webapp.accounts.access import check
from webapp.audit.record import Actor, record
from webapp.celery import app as celery_app
from webapp.checkpoints.models import Checkpoint, Evaluation, EvaluationStatus
from webapp.errors import ActionError
from webapp.experiments.config_policy import check_config
from webapp.runs import ray_jobs
from webapp.runs.actions import require_services, runtime_env_of
from webapp.runs.claims import runs_area
from webapp.runs.models import MetricPoint, Run
from webapp.runs.snapshot import launch_spec

log = logging.getLogger(__name__)

ACCURACY = "accuracy/mean@"  # the metric the table shows (mean@k of each taskset)
# the model version an in-run eval measured (rft_core.explorer logs it with each eval); a run
# from before it evaluated before loading its step's weights: the version its step used
EVAL_VERSION = "explorer/eval_model_version"
STEP_VERSION = "explorer/model_version"


def eval_taskset_names(run: Run) -> list[str]:
    """The names of the run's ``buffer.explorer_input.eval_tasksets``."""
    tasksets = ((run.config.get("buffer") or {}).get("explorer_input") or {}).get("eval_tasksets")
    return [t.get("name") for t in tasksets or [] if isinstance(t, dict) and t.get("name")]


def bench_config(run: Run, tasksets: list[str]) -> dict[str, Any]:
    """The run's config as a bench job over ``tasksets`` (module doc)."""
    data = json.loads(json.dumps(run.config))  # a deep copy of plain JSON
    data.pop("stages", None)
    data["mode"] = "bench"
    data["continue_from_checkpoint"] = True  # the seeded job dir is the bench's input
    explorer = data.setdefault("explorer", {})
    explorer["bench_on_latest_checkpoint"] = False
    explorer_input = data.setdefault("buffer", {}).setdefault("explorer_input", {})
    explorer_input["eval_tasksets"] = [
        t for t in explorer_input.get("eval_tasksets") or [] if t.get("name") in tasksets
    ]
    return data


def evaluate_checkpoints(
    actor: Actor, run: Run, checkpoints: list[Checkpoint], tasksets: list[str]
) -> Evaluation:
    """An Evaluation(queued) of ``checkpoints`` (of ``run``, one stage, full ones on disk) on
    ``tasksets`` (names of the run's eval tasksets); its task is enqueued on commit. Refused
    with the field named, nothing written."""
    check(actor, run, "checkpoint.evaluate")
    errors: dict[str, str] = {}
    if not checkpoints:
        errors["checkpoints"] = "choose at least one checkpoint"
    elif any(c.run_id != run.pk for c in checkpoints):
        errors["checkpoints"] = f"every checkpoint must be of run #{run.number}"
    elif len({c.stage for c in checkpoints}) > 1:
        errors["checkpoints"] = "choose checkpoints of one stage (their steps are counted apart)"
    elif pruned := [c for c in checkpoints if c.pruned or not Path(c.path).is_dir()]:
        errors["checkpoints"] = (
            "gone from disk, pruned by checkpoint retention (trainer.max_checkpoints_to_keep): "
            + ", ".join(f"{c.stage or ''}/global_step_{c.step}".lstrip("/") for c in pruned)
        )
    elif missing := [c for c in checkpoints if not is_full_checkpoint(Path(c.path))]:
        errors["checkpoints"] = "not on disk as full checkpoints: " + ", ".join(
            f"{c.stage or ''}/global_step_{c.step}".lstrip("/") for c in missing
        )
    known = eval_taskset_names(run)
    if not tasksets:
        errors["tasksets"] = (
            f"choose at least one of the run's eval tasksets {known}"
            if known
            else "the run's config has no buffer.explorer_input.eval_tasksets to evaluate on"
        )
    elif unknown := [t for t in tasksets if t not in known]:
        errors["tasksets"] = f"not eval tasksets of the run: {unknown} (it has {known})"
    if errors:
        raise ActionError(
            "the evaluation cannot start: " + "; ".join(errors.values()), errors=errors
        )
    check_config(config=bench_config(run, tasksets))  # what the job will read passes the checks
    require_services()
    with transaction.atomic():
        evaluation = Evaluation.objects.create(
            run=run, tasksets=list(tasksets), launched_by=actor.user
        )
        evaluation.checkpoints.set(checkpoints)
        record(
            actor,
            "checkpoint.evaluate",
            evaluation,
            after={
                "run": run.pk,
                "checkpoints": sorted(c.pk for c in checkpoints),
                "tasksets": list(tasksets),
            },
        )
        transaction.on_commit(lambda: _enqueue(evaluation.pk))
    return evaluation


def _enqueue(pk: int) -> None:
    celery_app.send_task("checkpoints.evaluate", args=(pk,), queue=settings.RFT_RUNS_QUEUE)


def _fail(evaluation: Evaluation, error: str) -> Evaluation:
    evaluation.status = EvaluationStatus.FAILED
    evaluation.error = error[:2000]
    evaluation.finished_at = timezone.now()
    evaluation.save(update_fields=["status", "error", "finished_at"])
    return evaluation


def start_evaluation(pk: int) -> Evaluation:
    """Write the bench config, link the checkpoints into its job dir, submit the Ray job."""
    evaluation = Evaluation.objects.select_related("run__experiment").get(pk=pk)
    if evaluation.status != EvaluationStatus.QUEUED:
        return evaluation  # a second delivery
    run = evaluation.run
    try:
        checked = check_config(config=bench_config(run, evaluation.tasksets))
        spec = launch_spec(
            checked.data, checked.config, f"eval-{pk}", runs_area(run.experiment.owner)
        )
        spec.write()
        seed_job_dir(spec.job_dir, [Path(c.path) for c in evaluation.checkpoints.all()])
    except (ActionError, CheckpointError, OSError) as err:
        return _fail(
            evaluation, f"the bench job could not be prepared: {getattr(err, 'message', err)}"
        )
    sid = f"rft-eval-{run.key}-{pk}"
    env = runtime_env_of(run)  # the deployment's env, plug-ins and ${oc.env:...} variables
    for name in (ENV_REDIS_URL, ENV_REDIS_PREFIX, ENV_RUN_ID):  # not the run's live stream
        env["env_vars"].pop(name, None)
    try:
        ray_jobs.submit(
            entrypoint=f"{settings.RFT_TRINITY_COMMAND} run --config {shlex.quote(str(spec.config_path))}",
            submission_id=sid,
            runtime_env=env,
            metadata={"rft_run": run.pk, "rft_evaluation": pk},
        )
    except Exception as err:  # noqa: BLE001 - whatever refused the job, the row says why
        return _fail(evaluation, f"the Ray job could not be submitted: {err}")
    evaluation.status = EvaluationStatus.RUNNING
    evaluation.submission_id = sid
    evaluation.job_dir = str(spec.job_dir)
    evaluation.save(update_fields=["status", "submission_id", "job_dir"])
    return evaluation


def follow_evaluation(pk: int) -> bool:
    """One poll of the bench job; at its end the results are read. True while it runs."""
    evaluation = Evaluation.objects.get(pk=pk)
    if evaluation.status != EvaluationStatus.RUNNING:
        return False
    try:
        state = ray_jobs.status(evaluation.submission_id)
    except ray_jobs.JobNotFound:
        _fail(evaluation, "the bench job is unknown to Ray (its head restarted?)")
        return False
    except ray_jobs.RayJobsError:
        return True  # Ray does not answer now: ask again later
    if not state.terminal:
        return True
    if state.status != "SUCCEEDED":
        try:
            text = ray_jobs.logs(evaluation.submission_id)
        except ray_jobs.RayJobsError:
            text = state.message
        _fail(evaluation, f"the bench job {state.status.lower()}: {ray_jobs.last_error_line(text)}")
        return False
    evaluation.results = read_results(evaluation)
    evaluation.status = EvaluationStatus.SUCCEEDED
    evaluation.finished_at = timezone.now()
    evaluation.save(update_fields=["results", "status", "finished_at"])
    return False


def read_results(evaluation: Evaluation) -> dict[str, dict[str, dict[str, Any]]]:
    """``{checkpoint id: {taskset: {"metric", "value"}}}`` from the bench job's
    ``monitor/explorer_metrics.jsonl`` (``bench/<taskset>/accuracy/mean@k`` at each step)."""
    by_step = {c.step: str(c.pk) for c in evaluation.checkpoints.all()}
    path = Path(evaluation.job_dir) / "monitor" / "explorer_metrics.jsonl"
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        checkpoint = by_step.get(row.get("step"))
        if checkpoint is None:
            continue
        for name, value in row.items():
            parts = name.split("/", 2)  # bench / <taskset> / accuracy/mean@k
            if len(parts) == 3 and parts[0] == "bench" and parts[2].startswith(ACCURACY):
                cell = {"metric": parts[2], "value": value}
                results.setdefault(checkpoint, {})[parts[1]] = cell
    return results


@dataclass
class EvaluationTable:
    tasksets: list[str]
    # {"checkpoint", "cells": [value|None], "mean", "best", "in_run": [value|None], "note"}
    rows: list[dict[str, Any]]
    metric: str  # e.g. accuracy/mean@1


def in_run_eval(
    checkpoint: Checkpoint, tasksets: list[str], metric: str
) -> tuple[list[float | None], float | None]:
    """The run's own eval logged at the checkpoint's stage and step: a value per taskset of
    ``eval/<taskset>/<metric>`` and the model version it measured (the last one logged)."""
    names = {f"eval/{t}/{metric}": i for i, t in enumerate(tasksets)}
    cells: list[float | None] = [None] * len(tasksets)
    versions: dict[str, float | None] = {}
    points = MetricPoint.objects.filter(
        run_id=checkpoint.run_id,
        stage=checkpoint.stage,
        step=checkpoint.step,
        name__in=[*names, EVAL_VERSION, STEP_VERSION],
    ).order_by("id")
    for name, value in points.values_list("name", "value"):
        if name in names:
            cells[names[name]] = value
        else:
            versions[name] = value
    return cells, versions.get(EVAL_VERSION, versions.get(STEP_VERSION))


def difference_note(step: int, bench: list, in_run: list, version: float | None) -> str:
    """Why this evaluation of ``global_step_<step>`` and the run's eval at that step differ
    (empty when they agree or the run did not eval there)."""
    if all(v is None for v in in_run) or in_run == bench:
        return ""
    if version is not None and int(version) != step:
        return (
            f"The run's own eval at step {step} measured model version {int(version)} (the "
            f"weights after trainer step {int(version)}), not global_step_{step}: the explorer "
            "evaluates with the weights it holds (synchronizer.sync_interval, sync_offset; "
            "runs from before the fix of issue 31 evaluated before loading the step's "
            f"weights). This evaluation loaded global_step_{step} itself."
        )
    return (
        f"Both measured the weights of global_step_{step}: the eval tasksets' "
        "rollout_args.temperature above 0 samples other responses in each run."
    )


def accuracy_table(evaluation: Evaluation) -> EvaluationTable:
    """Checkpoint x taskset accuracies; the best row (highest mean over the tasksets) marked."""
    tasksets = list(evaluation.tasksets)
    rows, metric = [], ""
    checkpoints = sorted(evaluation.checkpoints.all(), key=lambda c: (c.stage, c.step))
    for checkpoint in checkpoints:
        found = evaluation.results.get(str(checkpoint.pk), {})
        cells = [found.get(t, {}).get("value") for t in tasksets]
        metric = metric or next((found[t]["metric"] for t in tasksets if t in found), "")
        values = [v for v in cells if isinstance(v, int | float)]
        mean = sum(values) / len(values) if values else None
        in_run, version = in_run_eval(checkpoint, tasksets, metric or f"{ACCURACY}1")
        note = difference_note(checkpoint.step, cells, in_run, version)
        row = {"checkpoint": checkpoint, "cells": cells, "mean": mean, "best": False}
        rows.append(row | {"in_run": in_run, "note": note})
    scored = [r for r in rows if r["mean"] is not None]
    if scored:
        max(scored, key=lambda r: r["mean"])["best"] = True
    return EvaluationTable(tasksets=tasksets, rows=rows, metric=metric)
