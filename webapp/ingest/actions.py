"""The web side's public functions for the event ingestor (``workers.ingestor``), the one way a
worker process writes a run's events: the workers talk to the web side only through action
functions like these, never through the stores or the Channels plumbing beneath them.

    record_events(run_key, entries) -> (Run | None, new RunEvent rows)
        one batch of a run's stream entries ``(stream id, fields)`` stored and projected in ONE
        transaction (``store.store_events``): each entry not stored yet a ``RunEvent`` with the
        key's next seq, projected into metric points, log lines, samples, checkpoints and the
        run's status and progress; malformed entries are logged and skipped; an entry stored
        before (a replay) writes nothing again
    publish_events(run, rows)
        the batch's new events as ONE ``{"type": "events", "first_seq", "last_seq", "events"}``
        message to the run's page (``run-<pk>``); call it after the transaction committed

System actions: no permission check, no audit row (the events are the run's own record).
"""

from __future__ import annotations

from webapp.events.models import RunEvent
from webapp.ingest.store import event_rows, store_events
from webapp.runs.live import events_message, run_group, send
from webapp.runs.models import Run


def record_events(run_key: str, entries: list) -> tuple[Run | None, list[RunEvent]]:
    """Store and project one batch of stream entries of run ``run_key`` (the module doc).
    Returns the run (None when no Run has this key: its events are kept, nothing is projected)
    and the rows stored for the first time, with their seqs, in stream order."""
    return store_events(run_key, event_rows(run_key, entries))


def publish_events(run: Run, rows: list[RunEvent], channel_layer=None) -> None:
    """Push ``rows`` (``record_events``'s new rows, not empty) to the run's live page as one
    ``events`` message; ``channel_layer`` is the caller's, reused across batches."""
    message = events_message([row.as_message() for row in rows])
    send([run_group(run.pk)], message, channel_layer)
