"""The actions that follow a run through its stages, from its monitor's events (called by the
ingestor's projection, ``webapp.ingest.projection``, inside its transaction): the stage it is
in, its furthest step there and the times of its newest steps (the ETA's rate), and what each
role is doing (``phase`` events). What these mean on the page: ``webapp.runs.progress``.
"""

from __future__ import annotations

from django.db import transaction

from webapp.runs.live import publish_run
from webapp.runs.models import Run
from webapp.runs.progress import note_step, role_phase, stage_plan
from webapp.runs.snapshot import stage_total_steps


def enter_stage(run: Run, stage: str) -> list[str]:
    """``run`` (not saved) moved into ``stage``: its steps start again, with the stage's total
    from the launch config, and nothing of the last stage's rate or phases is kept. Returns the
    fields changed."""
    run.stage = stage
    run.step = None
    run.total_steps = stage_total_steps(run.config or {}, stage)
    run.step_times = []
    run.phases = {}
    return ["stage", "step", "total_steps", "step_times", "phases"]


def observe_phase(
    run: Run, *, role: str, phase: str, step: int | None, ts: float, stage: str
) -> None:
    """A role's ``phase`` event: what it does from ``ts`` on (``webapp.runs.progress``). A phase
    of a stage the run has left is ignored; one of a new stage moves the run into it."""
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        fields = ["phases"]
        if stage != locked.stage:
            if stage in _stages_seen(locked):
                return
            fields += enter_stage(locked, stage)
        phases = locked.phases or {}
        locked.phases = {**phases, role: role_phase(phases.get(role), phase, step, ts)}
        locked.save(update_fields=sorted(set(fields)))
        publish_run(locked)


def _stages_seen(run: Run) -> list[str]:
    """The stages of ``run``'s config before its current one (a late event of one is old news)."""
    names = [p["name"] for p in stage_plan(run.config or {})]
    return names[: names.index(run.stage)] if run.stage in names else []


def observe_progress(
    run: Run,
    *,
    stage: str,
    step: int | None,
    total_steps: int | None = None,
    times: list[tuple[float, int]] = (),
) -> None:
    """The furthest step the run reported in ``stage`` (a new stage starts its steps again),
    and the stage's total from the launch config when the caller does not give one; ``times``
    (``(unix s, step)`` as the steps were reported) feed the ETA's step rate. Steps of a stage the run has left
    (a late metric of the SFT stage) change nothing."""
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        fields: list[str] = []
        if locked.stage != stage:
            if locked.stage and stage in _stages_seen(locked):
                return
            fields += enter_stage(locked, stage)
        if total_steps is not None and total_steps != locked.total_steps:
            locked.total_steps = total_steps
            fields.append("total_steps")
        if step is not None and (locked.step is None or step > locked.step):
            locked.step = step
            fields.append("step")
        step_times = locked.step_times
        for ts, reached in times:
            step_times = note_step(step_times, ts, reached)
        if step_times != locked.step_times:
            locked.step_times = step_times
            fields.append("step_times")
        if fields:
            locked.save(update_fields=sorted(set(fields)))
            publish_run(locked)
