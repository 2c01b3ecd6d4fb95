"""The projection of a run's new events into the dashboard's rows, through the apps that own
them (the events app never writes a Run itself):

    metric      -> webapp.runs.telemetry.record_metrics (MetricPoint rows, eval accuracy)
                   and webapp.runs.actions.observe_progress (the latest stage, its top step)
    log         -> webapp.runs.telemetry.record_logs (LogLine rows)
    samples     -> webapp.runs.telemetry.record_samples (RolloutSample rows; the trainer's:
                   record_trainer_logprobs, its log-probs beside those rows' tokens)
    checkpoint  -> webapp.checkpoints.actions.observe_checkpoint (Checkpoint row; for a run
                   started outside the dashboard only inside its job dir)
    status      -> webapp.runs.actions.observe_status, in stream order
    heartbeat   -> webapp.runs.actions.observe_heartbeat (the latest one of the batch)
    phase       -> webapp.runs.actions.observe_phase (each role's latest of the batch)

The ingestor calls :func:`project` inside the transaction that stores the events, with only
the events stored for the first time, so a replayed stream projects nothing twice.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from rft_core.monitor.events import PHASES
from webapp.checkpoints.actions import observe_checkpoint
from webapp.events.models import RunEvent
from webapp.runs import actions as run_actions
from webapp.runs.models import Run, RunOrigin
from webapp.runs.telemetry import (
    record_logs,
    record_metrics,
    record_samples,
    record_trainer_logprobs,
)

log = logging.getLogger(__name__)


def _inside_job_dir(run: Run, path: str) -> bool:
    """A checkpoint event of a run started outside the dashboard counts only inside the job dir
    it registered (which is inside the allowed roots): the dashboard reads and writes there."""
    if run.origin == RunOrigin.DASHBOARD:
        return True  # our own Ray job wrote it, into the job dir we gave it
    root = os.path.realpath(run.job_dir) if run.job_dir else ""
    real = os.path.realpath(path)
    if root and os.path.commonpath([real, root]) == root:
        return True
    log.warning("run %s: checkpoint %s is outside its job dir %r; ignored", run.pk, path, root)
    return False


def project(run: Run, events: Sequence[RunEvent]) -> None:
    """Write what ``events`` (new, in stream order) say about ``run``."""
    metrics = [e for e in events if e.kind == "metric"]
    record_metrics(run, metrics)
    record_logs(run, [e for e in events if e.kind == "log"])
    samples = [e for e in events if e.kind == "samples"]
    record_samples(run, samples)
    record_trainer_logprobs(run, samples)
    for event in events:
        if event.kind == "checkpoint":
            path = event.payload.get("path") if isinstance(event.payload, dict) else None
            if event.step is not None and path and _inside_job_dir(run, str(path)):
                observe_checkpoint(run, stage=event.stage, step=event.step, path=str(path))
        elif event.kind == "status":
            data = event.payload if isinstance(event.payload, dict) else {}
            run_actions.observe_status(
                run,
                str(data.get("state", "")),
                str(data.get("message", "")),
                event.emitted_at.timestamp(),
                stage=event.stage,
            )
    heartbeats = [e for e in events if e.kind == "heartbeat"]
    if heartbeats:
        run_actions.observe_heartbeat(run, heartbeats[-1].emitted_at.timestamp())
    # explorer and trainer interleave their steps: each stage's furthest one, the stages in the
    # order they appear (a late step of a stage the run has left changes nothing)
    reached: dict[str, list[tuple[float, int]]] = {}
    for event in metrics:
        if event.step is not None:
            reached.setdefault(event.stage, []).append((event.emitted_at.timestamp(), event.step))
    for stage, times in reached.items():
        run_actions.observe_progress(run, stage=stage, step=max(s for _, s in times), times=times)
    latest_phase = {e.role: e for e in events if e.kind == "phase"}
    for role, event in latest_phase.items():
        data = event.payload if isinstance(event.payload, dict) else {}
        if data.get("phase") in PHASES:
            run_actions.observe_phase(
                run,
                role=role,
                phase=data["phase"],
                step=event.step,
                ts=event.emitted_at.timestamp(),
                stage=event.stage,
            )
