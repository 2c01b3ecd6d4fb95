"""A run's tags and notes: what its owner (or staff) writes on it to find and remember it.

``set_run_tags`` and ``set_run_notes`` are the two action functions: each checks permission,
changes one thing and writes one audit row (``run.tags`` / ``run.notes``) with the value before
and after, in one transaction. Tags are the experiments' ``Tag`` rows (one vocabulary for the
filters of both lists); their cleaning is ``webapp.experiments.actions.clean_tags``'s.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from webapp.accounts.access import check
from webapp.audit.record import Actor, record
from webapp.errors import ActionError
from webapp.experiments.actions import clean_tags
from webapp.experiments.models import Tag
from webapp.runs.models import Run

TAGS_MAX = 20  # tags on one run
NOTES_MAX = 20_000  # characters


def run_tags(run: Run) -> list[str]:
    return sorted(tag.name for tag in run.tags.all())


def set_run_tags(actor: Actor, run: Run, tags: Iterable[str] | str) -> list[str]:
    """Replace the run's tags with ``tags`` (a list, or comma-separated text); returns them
    sorted. Refused (nothing written) past TAGS_MAX tags or with a bad tag, naming ``tags``."""
    check(actor, run, "run.tags")
    names = clean_tags(tags, field="tags")
    if len(names) > TAGS_MAX:
        msg = f"a run has at most {TAGS_MAX} tags ({len(names)} given)"
        raise ActionError(f"tags: {msg}", errors={"tags": msg})
    with transaction.atomic():
        before = run_tags(run)
        run.tags.set([Tag.objects.get_or_create(name=name)[0] for name in names])
        after = run_tags(run)
        record(actor, "run.tags", run, before={"tags": before}, after={"tags": after})
    return after


def set_run_notes(actor: Actor, run: Run, notes: str) -> str:
    """Replace the run's notes; refused (nothing written) past NOTES_MAX characters or with a
    NUL character, naming ``notes``."""
    check(actor, run, "run.notes")
    notes = str(notes or "").replace("\r\n", "\n")
    if "\x00" in notes:
        msg = "holds a NUL character, which no database text can store"
        raise ActionError(f"notes: {msg}", errors={"notes": msg})
    if len(notes) > NOTES_MAX:
        msg = f"at most {NOTES_MAX:,} characters ({len(notes):,} given)"
        raise ActionError(f"notes: {msg}", errors={"notes": msg})
    with transaction.atomic():
        before = Run.objects.select_for_update().values_list("notes", flat=True).get(pk=run.pk)
        Run.objects.filter(pk=run.pk).update(notes=notes)
        run.notes = notes
        record(actor, "run.notes", run, before={"notes": before}, after={"notes": notes})
    return notes
