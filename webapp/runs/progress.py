"""A run's progress as its stages make it: which stage it is in (of how many), the step within
that stage and the stage's total, a fraction per stage and for the whole run, an ETA from the
recent step rate (the newest ``STEP_WINDOW`` steps: a machine that got busy, or a checkpoint
every few steps, shows in it within a window; "machine busy" when that rate is well below the
stage's earlier one), and what the run is doing now (its roles' phases).

Stages restart their steps (``rft_core.runtime.launcher``: the GRPO stage after an SFT warmup starts at
step 1), so a run's ``step`` is always the step *of its stage*; the whole-run fraction weighs
each stage by its total steps (a stage that runs by epochs, with no total, counts once it is
done). The ETA is the current stage's: a later stage runs at a rate nobody has seen yet
(GRPO's rollouts are far slower than SFT's steps), so the run's ETA is given only in its last
stage, where the two agree.

Pure functions over plain values; ``progress_of(run)`` reads what the ingestor keeps on the
Run (``stage``, ``step``, ``total_steps``, ``step_times``, ``phases``, ``config``).
"""

from __future__ import annotations

from typing import Any

from rft_core.monitor.events import PHASES

# (unix time, step) pairs kept per run for the rate: the newest STEP_WINDOW of its stage
STEP_WINDOW = 20
# the recent steps this many times slower than the stage's earlier ones: "machine busy"
BUSY_SLOWDOWN = 1.25
# what the run is doing when its roles do different things: the first of these any role does
# (an eval or a checkpoint holds the whole run up; rollouts and training overlap)
PHASE_PRIORITY = ("eval", "checkpoint", "train", "rollout", "waiting")
assert set(PHASE_PRIORITY) == set(PHASES)


def stage_plan(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The stages a launch config runs, in order: ``[{"name", "total_steps"}]`` (a config
    without ``stages`` is one stage named ""); ``total_steps`` is None for a stage that runs
    by epochs. A stage's own ``buffer`` replaces the global one, as in ``rft_core.config``."""
    buffer = config.get("buffer") if isinstance(config.get("buffer"), dict) else {}
    stages = [s for s in config.get("stages") or [] if isinstance(s, dict)]
    if not stages:
        return [{"name": "", "total_steps": _positive(buffer.get("total_steps"))}]
    plan = []
    for entry in stages:
        own = entry.get("buffer") if isinstance(entry.get("buffer"), dict) else buffer
        plan.append(
            {
                "name": str(entry.get("stage_name") or ""),
                "total_steps": _positive(own.get("total_steps")),
            }
        )
    return plan


def in_stage_order(
    config: dict[str, Any], rows: list, stage=lambda r: r.stage, step=lambda r: r.step
) -> list:
    """``rows`` (checkpoints, ...) in the order the run made them: by its stages as the config
    runs them (``sft_warmup`` before ``rft``, whatever the alphabet says; a stage the config does
    not name after those), then by step."""
    order = {entry["name"]: i for i, entry in enumerate(stage_plan(config))}
    return sorted(rows, key=lambda r: (order.get(stage(r), len(order)), stage(r), step(r) or 0))


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def note_step(step_times: list, ts: float, step: int) -> list[list[float]]:
    """``step_times`` with ``(ts, step)`` added when ``step`` is further than the newest one:
    the stage's first step (the anchor of its whole rate) and its newest ``STEP_WINDOW``."""
    times = [list(p) for p in step_times or []]
    if times and step <= times[-1][1]:
        return times
    times.append([float(ts), int(step)])
    if len(times) > STEP_WINDOW + 1:
        times = times[:1] + times[-STEP_WINDOW:]
    return times


def _rate(first: list, last: list) -> float | None:
    (t0, s0), (t1, s1) = first, last
    return (s1 - s0) / (t1 - t0) if t1 > t0 and s1 > s0 else None


def step_rate(step_times: list) -> float | None:
    """Steps a second over the recent window (the newest ``STEP_WINDOW`` steps), None with
    fewer than two steps or no time between them."""
    recent = (step_times or [])[-STEP_WINDOW:]
    return _rate(recent[0], recent[-1]) if len(recent) >= 2 else None


def machine_busy(step_times: list) -> bool:
    """Whether the recent steps run ``BUSY_SLOWDOWN`` times slower than the stage's earlier
    ones (from its first step to the recent window): the machine is shared or throttled, and
    the ETA, at the recent rate, is later than the stage's start promised."""
    times = step_times or []
    if len(times) <= STEP_WINDOW:  # no earlier steps outside the window yet
        return False
    earlier = _rate(times[0], times[-STEP_WINDOW])
    recent = step_rate(times)
    return earlier is not None and recent is not None and recent * BUSY_SLOWDOWN < earlier


def eta_seconds(step_times: list, step: int | None, total: int | None, now: float) -> float | None:
    """Seconds until ``total`` at the recent rate, counted from the newest step's time (so the
    figure counts down between steps, and never below 0); None without a total or a rate."""
    rate = step_rate(step_times)
    if rate is None or not total or step is None:
        return None
    if step >= total:
        return 0.0
    since = max(0.0, now - step_times[-1][0])
    return max(0.0, (total - step) / rate - since)


def role_phase(previous: dict[str, Any] | None, phase: str, step: int | None, ts: float) -> dict:
    """A role's ``{phase, step, since}`` after its ``phase`` event at ``ts``: ``since`` is when
    the phase began, kept while the role stays in it step after step and across a checkpoint
    that interrupts it (the page's "training · 12m" is the training's time, not the time since
    the last save); a checkpoint remembers what it interrupted (``paused``)."""
    previous = previous if isinstance(previous, dict) else {}
    paused = previous.get("paused") or {}
    if previous.get("phase") == phase:
        since = previous.get("since", ts)
    elif previous.get("phase") == "checkpoint" and paused.get("phase") == phase:
        since = paused.get("since", ts)
    else:
        since = ts
    entry: dict[str, Any] = {"phase": phase, "step": step, "since": since}
    if phase == "checkpoint":
        entry["paused"] = (
            paused
            if previous.get("phase") == "checkpoint"
            else {"phase": previous.get("phase"), "since": previous.get("since", ts)}
        )
    return entry


def current_phase(phases: dict[str, Any]) -> str | None:
    """The run's phase from its roles' (``{role: {"phase": ...}}``): ``PHASE_PRIORITY``'s
    first one that some role is in; None when no role said."""
    doing = {p.get("phase") for p in (phases or {}).values() if isinstance(p, dict)}
    return next((phase for phase in PHASE_PRIORITY if phase in doing), None)


def progress(
    *,
    plan: list[dict[str, Any]],
    stage: str,
    step: int | None,
    total_steps: int | None,
    step_times: list,
    phases: dict[str, Any],
    active: bool,
    succeeded: bool,
    now: float,
) -> dict[str, Any]:
    """The progress fields of a run state (see the module docstring)."""
    names = [p["name"] for p in plan]
    index = names.index(stage) if stage in names else (0 if len(plan) == 1 and not stage else None)
    stage_total = (
        total_steps if total_steps else (plan[index]["total_steps"] if index is not None else None)
    )
    stages = []
    for i, entry in enumerate(plan):
        if succeeded or (index is not None and i < index):
            done = 1.0
        elif index is not None and i == index and stage_total and step is not None:
            done = min(1.0, step / stage_total)
        else:
            done = 0.0
        stages.append(
            {"name": entry["name"], "total_steps": entry["total_steps"], "fraction": done}
        )
    weights = [s["total_steps"] or 0 for s in stages]
    if all(weights):
        run_fraction = sum(w * s["fraction"] for w, s in zip(weights, stages, strict=True)) / sum(
            weights
        )
    else:  # a stage by epochs: count stages
        run_fraction = sum(s["fraction"] for s in stages) / len(stages) if stages else None
    eta = eta_seconds(step_times, step, stage_total, now) if active else None
    last_stage = index is not None and index == len(plan) - 1
    return {
        "stage_index": index,
        "stage_count": len(plan),
        "stage_step": step,
        "stage_total_steps": stage_total,
        "stage_fraction": stages[index]["fraction"] if index is not None else None,
        "run_fraction": run_fraction,
        "stages": stages,
        "step_rate": step_rate(step_times) if active else None,
        "machine_busy": machine_busy(step_times) if active else False,
        "stage_eta_s": eta,
        "run_eta_s": eta if last_stage else None,
        "phase": current_phase(phases) if active else None,
        "phases": dict(phases or {}) if active else {},
        "progress_at": now,
    }


def progress_of(run: Any, now: float) -> dict[str, Any]:
    """:func:`progress` of a Run row."""
    from webapp.runs.models import ACTIVE_STATUSES, RunStatus

    return progress(
        plan=stage_plan(run.config or {}),
        stage=run.stage or "",
        step=run.step,
        total_steps=run.total_steps,
        step_times=run.step_times or [],
        phases=run.phases or {},
        active=run.status in ACTIVE_STATUSES,
        succeeded=run.status == RunStatus.SUCCEEDED,
        now=now,
    )
