"""Storing a run's events (the ``webapp.events`` log): rows keyed by stream id, each with the next dense ``seq`` of its run
key, projected into the dashboard's rows, in one transaction (the ingestor's batches, and the
import of a job dir's record).

One batch (``store_events``) runs under the run's row lock (PostgreSQL: an advisory lock on the
key when no Run has it): every event not stored yet becomes a ``RunEvent`` with the next seq
of its key (1, 2, 3, ... in the given order) and is projected (``webapp.ingest.projection``);
a ``samples`` event's token arrays are stored once, in its ``RolloutSample`` rows, not in
its ``RunEvent.payload`` (``without_token_arrays`` says why).
An event already stored (a replay, or a claimed stream entry whose first consumer was only
slow) is recognised by its stream id and writes nothing again.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from datetime import UTC, datetime

from django.db import connection, transaction
from django.db.models import Max

from rft_core.monitor.events import MonitorEvent
from webapp.events.models import RunEvent
from webapp.ingest.projection import project
from webapp.runs.models import Run
from webapp.runs.telemetry import TOKEN_FIELDS

log = logging.getLogger(__name__)


def event_rows(run_key: str, entries: list) -> list[RunEvent]:
    """Unsaved RunEvent rows of stream entries ``(id, fields)``; malformed ones are skipped."""
    events = []
    for stream_id, fields in entries:
        sid = stream_id.decode() if isinstance(stream_id, bytes) else stream_id
        try:
            events.append((sid, MonitorEvent.from_fields(fields)))
        except (KeyError, ValueError) as err:
            log.warning("skipping malformed entry %s %s: %s", run_key, sid, err)
    return rows_of(run_key, events)


def rows_of(run_key: str, events: Iterable[tuple[str, MonitorEvent]]) -> list[RunEvent]:
    """Unsaved RunEvent rows of ``(stream id, event)`` pairs."""
    return [
        RunEvent(
            run_key=run_key,
            stream_id=sid,
            kind=event.kind,
            role=json_safe(event.role)[:32],
            stage=json_safe(event.stage)[:100],
            step=event.step,
            payload=json_safe(event.data),
            emitted_at=datetime.fromtimestamp(event.ts, tz=UTC),
        )
        for sid, event in events
    ]


def json_safe(value):
    """``value`` with NaN and infinities as null and NUL characters as U+FFFD: PostgreSQL's
    jsonb and text columns refuse those, and a batch they fail would stay pending forever."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {json_safe(str(k)): json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def _lock_key(run_key: str) -> Run | None:
    """The run's row lock (its Run, None when no Run has the key). Without a Run, PostgreSQL
    takes a transaction-scoped advisory lock on the key; SQLite's IMMEDIATE transactions
    serialise every writer already."""
    run = Run.objects.select_for_update().filter(key=run_key).first()
    if run is None and connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [run_key])
    return run


def store_events(run_key: str, rows: list[RunEvent]) -> tuple[Run | None, list[RunEvent]]:
    """Insert the rows not stored yet, each with the key's next ``seq``, and project them into
    the run's rows, in one transaction. Returns the run (None when no Run has this key) and
    the new rows (with their seqs) in stream order."""
    if not rows:
        return Run.objects.filter(key=run_key).first(), []
    with transaction.atomic():
        # the lock serialises two ingestors handling one key: seqs stay dense, and the second
        # of two consumers handling one entry sees it stored and writes nothing
        run = _lock_key(run_key)
        seen = set(
            RunEvent.objects.filter(
                run_key=run_key, stream_id__in=[r.stream_id for r in rows]
            ).values_list("stream_id", flat=True)
        )
        fresh: list[RunEvent] = []
        for row in rows:
            if row.stream_id not in seen:
                seen.add(row.stream_id)  # an entry twice in one batch (claimed + read) once
                fresh.append(row)
        if not fresh:
            return run, []
        top = RunEvent.objects.filter(run_key=run_key).aggregate(top=Max("seq"))["top"] or 0
        for offset, row in enumerate(fresh, start=1):
            row.seq = top + offset
        # projected before they are written: the samples' token arrays go to their
        # RolloutSample rows only (``without_token_arrays``); nothing the projection writes
        # reads RunEvent rows back
        if run is not None:
            project(run, fresh)
        for row in fresh:
            if row.kind == "samples":
                row.payload = without_token_arrays(row.payload)
        # no ignore_conflicts: a conflict means a broken invariant, and the whole batch fails;
        # the rows keep their seqs (what the live message needs), so they are not read back
        RunEvent.objects.bulk_create(fresh)
    return run, fresh


def without_token_arrays(payload):
    """A ``samples`` payload without each entry's token view (``tokens``, ``logprobs``,
    ``trainer_logprobs``): one copy of those arrays is kept, ``RolloutSample.tokens``, the one
    the token view reads per rollout (paged, filtered, its lists checked against the tokens'
    length); the event log is re-read whole by every live page (``live.json``, the WebSocket
    message), which shows no tokens, so there they only weighed."""
    if not isinstance(payload, dict) or not isinstance(payload.get("samples"), list):
        return payload
    samples = [
        {k: v for k, v in entry.items() if k not in TOKEN_FIELDS}
        if isinstance(entry, dict)
        else entry
        for entry in payload["samples"]
    ]
    return {**payload, "samples": samples}
