"""The live run page's data: the JSON states of a run and a checkpoint, the snapshot the page
loads first, the events after a sequence number, and the pushes to the Channels groups.

    run_state(run) -> RunState              checkpoint_state(ckpt) -> CheckpointState
    snapshot(run) -> the ``live.json`` body  events_after(run, seq) -> the ``?after=`` body
    publish_run(run)         {"type": "run", "run": RunState} to run-<pk>, runs-user-<owner pk>
                             and runs-staff

A checkpoint's push, ``{"type": "checkpoint", "checkpoint": CheckpointState}`` to run-<pk>, is
``webapp.checkpoints.actions.publish_checkpoint``: the checkpoints app sits above this one, which
reads a run's checkpoints through the relation (``run.checkpoints``) and imports no Checkpoint.

The ingestor sends each stored batch as ``{"type": "events", "first_seq", "last_seq",
"events"}`` to run-<pk> (``workers.ingestor``). Every group message has the Channels type
``live.message`` and the protocol message under ``"message"``: a consumer forwards it as is
(``webapp.runs.consumers``).

A publish is sent once the surrounding transaction commits (``transaction.on_commit``; at once
outside one) and reads the row again then, so a client never sees a state that was rolled back
and two quick changes send the newest state. A publish that fails (Redis down) is logged and
dropped: the page's snapshot and polling still show the truth.

The snapshot reads columns with ``values_list`` (no model instances: 100,000 metric points load
in well under a second) and includes rows up to one ``seq``, read first: a metric point of a
later event is left to the deltas, so a client applying batches after ``seq`` counts nothing
twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import Max, Min, Q

from webapp.events.models import RunEvent
from webapp.runs.models import LogLine, MetricPoint, RolloutSample, Run
from webapp.runs.progress import in_stage_order, progress_of

if TYPE_CHECKING:  # a type only: the checkpoints app imports this one
    from webapp.checkpoints.models import Checkpoint

log = logging.getLogger(__name__)

MESSAGE_TYPE = "live.message"  # the Channels type of every live group message
SNAPSHOT_LOGS = 500
SNAPSHOT_SAMPLE_STEPS = 5
EVENTS_PAGE = 5000
STAFF_GROUP = "runs-staff"


def run_group(run_pk: int) -> str:
    """The Channels group of one run's live messages."""
    return f"run-{run_pk}"


def user_group(user_pk: int) -> str:
    """The Channels group of the run list feed of one user (the runs they own)."""
    return f"runs-user-{user_pk}"


def _unix(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


# ---------------------------------------------------------------- states


def run_state(run: Run) -> dict[str, Any]:
    """RunState: the run's row as the page shows it (times in unix seconds or null)."""
    return {
        "id": run.pk,
        "number": run.number,
        "experiment_id": run.experiment_id,
        "status": run.status,
        "origin": run.origin,
        "cancel_requested": run.cancel_requested_at is not None,
        "stage": run.stage,
        "step": run.step,
        "total_steps": run.total_steps,
        "created": _unix(run.created),
        "started_at": _unix(run.started_at),
        "finished_at": _unix(run.finished_at),
        "last_heartbeat": _unix(run.last_heartbeat),
        "exit_reason": run.exit_reason,
        "last_error": run.last_error,
        "job_dir": run.job_dir,
        "submission_id": run.submission_id,
        "last_eval_accuracy": run.last_eval_accuracy,
        "best_eval_accuracy": run.best_eval_accuracy,
        "headline": run.headline,  # the stage's reward, or its own metric (SFT's loss)
        "url": run.get_absolute_url(),
        # stage_index, stage_count, stage_step, stage_total_steps, fractions, ETA, phase
        **progress_of(run, time.time()),
    }


def checkpoint_state(ckpt: Checkpoint) -> dict[str, Any]:
    """CheckpointState: the checkpoint's row with its conversion state and the Convert URL."""
    return {
        "id": ckpt.pk,
        "run_id": ckpt.run_id,
        "stage": ckpt.stage,
        "step": ckpt.step,
        "path": ckpt.path,
        "size_bytes": ckpt.size_bytes,
        "hf_status": ckpt.hf_status,
        "hf_progress": ckpt.hf_progress,
        "hf_path": ckpt.hf_path,
        "hf_error": ckpt.hf_error,
        "pruned": ckpt.pruned,
        "created": _unix(ckpt.created),
        "convert_url": f"/checkpoints/{ckpt.pk}/convert/",
        "fork_url": f"/checkpoints/{ckpt.pk}/fork/",
    }


# ---------------------------------------------------------------- snapshot and deltas


def last_seq(run: Run) -> int:
    """The seq of the run's newest stored event (0 when none)."""
    return RunEvent.objects.filter(run_key=run.key).aggregate(top=Max("seq"))["top"] or 0


def _upto(seq: int) -> Q:
    # rows without a seq were written from elsewhere (an import): always included
    return Q(seq__lte=seq) | Q(seq__isnull=True)


def _metrics(run: Run, seq: int) -> dict[str, dict[str, Any]]:
    series: dict[str, dict[str, Any]] = {}
    rows = (
        MetricPoint.objects.filter(_upto(seq), run=run)
        .order_by("id")
        .values_list("name", "role", "step", "wall_time", "value", "stage")
    )
    for name, role, step, wall_time, value, stage in rows.iterator(chunk_size=20_000):
        s = series.get(name)
        if s is None:
            s = series[name] = {"role": role, "step": [], "wall_time": [], "value": [], "stage": []}
        s["step"].append(step)
        s["wall_time"].append(wall_time)
        s["value"].append(value)
        s["stage"].append(stage)
    return series


def _stages(run: Run, seq: int) -> list[dict[str, Any]]:
    rows = (
        RunEvent.objects.filter(run_key=run.key, seq__lte=seq)
        .exclude(stage="")
        .values("stage")
        .annotate(start=Min("emitted_at"), end=Max("emitted_at"), first=Min("seq"))
        .order_by("first")
    )
    return [{"name": r["stage"], "start": _unix(r["start"]), "end": _unix(r["end"])} for r in rows]


def log_item(seq, actor, level, stage, ts, text) -> dict[str, Any]:
    return {"seq": seq, "actor": actor, "level": level, "stage": stage, "ts": ts, "text": text}


def _logs(run: Run, seq: int) -> list[dict[str, Any]]:
    rows = (
        LogLine.objects.filter(_upto(seq), run=run)
        .order_by("-id")
        .values_list("seq", "actor", "level", "stage", "wall_time", "text")[:SNAPSHOT_LOGS]
    )
    return [log_item(*row) for row in reversed(rows)]


def sample_item(stage, step, prompt, response, truth, reward, group, extra) -> dict[str, Any]:
    """A stored sample as the live page's cards take it (the fields of its ``samples`` event
    entry: a DPO pair's sides are paired by ``group``)."""
    item = dict(extra or {})
    item.update(
        {
            "stage": stage,
            "step": step,
            "prompt": prompt,
            "response": response,
            "truth": truth,
            "reward": reward,
        }
    )
    if group is not None:
        item["group"] = group
    return item


def _samples(run: Run, seq: int) -> list[dict[str, Any]]:
    recent = (
        RolloutSample.objects.filter(run=run, seq__lte=seq)
        .values("stage", "step")
        .annotate(newest=Max("id"))
        .order_by("-newest")[:SNAPSHOT_SAMPLE_STEPS]
    )
    steps = Q(pk__in=[])
    for r in recent:
        steps |= Q(stage=r["stage"], step=r["step"])
    rows = (
        RolloutSample.objects.filter(steps, run=run, seq__lte=seq)
        .order_by("id")
        .values_list("stage", "step", "prompt", "response", "truth", "reward", "group", "extra")
    )
    return [sample_item(*row) for row in rows]


def snapshot(run: Run) -> dict[str, Any]:
    """The ``live.json`` body: the run, every metric point, the stages, the last logs, the
    checkpoints and the samples of the last steps, all up to ``seq``."""
    with transaction.atomic():
        seq = last_seq(run)
        run = Run.objects.get(pk=run.pk)
        checkpoints = in_stage_order(run.config or {}, list(run.checkpoints.all()))
        return {
            "now": time.time(),
            "seq": seq,
            "run": run_state(run),
            "metrics": _metrics(run, seq),
            "stages": _stages(run, seq),
            "logs": _logs(run, seq),
            "checkpoints": [checkpoint_state(c) for c in checkpoints],
            "samples": _samples(run, seq),
        }


def events_after(run: Run, seq: int, limit: int = EVENTS_PAGE) -> dict[str, Any]:
    """The ``live.json?after=<seq>`` body: at most ``limit`` events after ``seq`` in order;
    ``more`` when there are further ones (the client asks again from the new ``seq``). It also
    carries every checkpoint's state: a ``checkpoint`` message (convert progress) sent while
    the client's socket was down has no seq to be refetched by."""
    rows = list(
        RunEvent.objects.filter(run_key=run.key, seq__gt=seq)
        .order_by("seq")
        .values_list("seq", "kind", "role", "stage", "step", "emitted_at", "payload")[: limit + 1]
    )
    more = len(rows) > limit
    events = [
        {
            "seq": s,
            "kind": kind,
            "role": role,
            "stage": stage,
            "step": step,
            "ts": at.timestamp(),
            "data": data,
        }
        for s, kind, role, stage, step, at, data in rows[:limit]
    ]
    fresh = Run.objects.get(pk=run.pk)
    checkpoints = in_stage_order(fresh.config or {}, list(fresh.checkpoints.all()))
    return {
        "now": time.time(),
        "seq": events[-1]["seq"] if events else seq,
        "run": run_state(fresh),
        "events": events,
        "checkpoints": [checkpoint_state(c) for c in checkpoints],
        "more": more,
    }


def events_message(events: list[dict[str, Any]]) -> dict[str, Any]:
    """One ingestor batch of a run as the protocol's ``events`` message."""
    return {
        "type": "events",
        "first_seq": events[0]["seq"],
        "last_seq": events[-1]["seq"],
        "events": events,
    }


# ---------------------------------------------------------------- publishing


def send(groups: list[str], message: dict[str, Any], channel_layer=None) -> None:
    """``message`` to each group now; a failure is logged, never raised."""
    from channels.layers import get_channel_layer

    layer = channel_layer if channel_layer is not None else get_channel_layer()
    if layer is None:
        return

    # serialized once here, not once per connected client: a consumer sends the text as it is
    envelope = {"type": MESSAGE_TYPE, "kind": message["type"], "text": json.dumps(message)}

    async def send_all() -> None:
        try:
            for group in groups:
                await layer.group_send(group, envelope)
        except Exception as err:  # noqa: BLE001 - live updates are best effort; rows are the truth
            log.warning("live update to %s not sent: %s", groups, err)

    _run_on_thread_loop(send_all)  # one entry into the loop for every group


_thread_loops = threading.local()
_pending: set[asyncio.Task] = set()  # sends scheduled on a running loop, until they finish


def _run_on_thread_loop(coroutine_function) -> None:
    """Run it to the end on this thread's own event loop, kept for the thread's life. The
    channel layer holds its Redis connection per loop: ``async_to_sync`` would make a loop,
    and so a connection, per call (the ingestor sends up to 20 batches a second). Called on a
    thread whose loop is running (async code calling this sync code directly), it cannot
    block that loop: the send becomes a task of it."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        task = running.create_task(coroutine_function())
        _pending.add(task)
        task.add_done_callback(_pending.discard)
        return
    loop = getattr(_thread_loops, "loop", None)
    if loop is None or loop.is_closed():
        loop = _thread_loops.loop = asyncio.new_event_loop()
    loop.run_until_complete(coroutine_function())


def publish_run(run: Run) -> None:
    """The run's full state to its page, its owner's list feed and the staff's, on commit."""
    pk = run.pk

    def push() -> None:
        fresh = Run.objects.select_related("experiment").filter(pk=pk).first()
        if fresh is None:
            return
        message = {"type": "run", "run": run_state(fresh)}
        send([run_group(pk), user_group(fresh.experiment.owner_id), STAFF_GROUP], message)

    transaction.on_commit(push)
