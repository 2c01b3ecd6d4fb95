"""The audit trail is append-only below every caller: the model and its querysets refuse to
change or delete a row, and the row in the database stays as written."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from webapp.audit.models import AuditEvent, AuditImmutable
from webapp.audit.record import Actor, record

pytestmark = pytest.mark.django_db


@pytest.fixture
def event() -> AuditEvent:
    alice = get_user_model().objects.create_user("alice", password="correct-horse-battery")
    actor = Actor(user=alice, ip="10.1.2.3", user_agent="pytest")
    return record(actor, "experiment.create", target_type="experiment", target_id=7, after={"a": 1})


def _unchanged(event: AuditEvent) -> None:
    row = AuditEvent.objects.get(pk=event.pk)
    assert (row.action, row.actor_name, row.target_id, row.after) == (
        "experiment.create",
        "alice",
        "7",
        {"a": 1},
    )


def test_record_writes_the_actor_target_ip_and_user_agent(event):
    row = AuditEvent.objects.get(pk=event.pk)
    assert row.actor_id == get_user_model().objects.get(username="alice").pk
    assert (row.actor_name, row.target_type, row.target_id) == ("alice", "experiment", "7")
    assert (row.ip, row.user_agent) == ("10.1.2.3", "pytest")


def test_it_refuses_to_save_an_existing_row(event):
    event.action = "experiment.delete"
    with pytest.raises(AuditImmutable):
        event.save()
    fresh = AuditEvent.objects.get(pk=event.pk)
    fresh.after = {"a": 2}
    with pytest.raises(AuditImmutable):
        fresh.save(update_fields=["after"])
    _unchanged(event)


def test_it_refuses_to_delete_a_row(event):
    with pytest.raises(AuditImmutable):
        AuditEvent.objects.get(pk=event.pk).delete()
    _unchanged(event)


def test_it_refuses_a_queryset_update_or_delete(event):
    with pytest.raises(AuditImmutable):
        AuditEvent.objects.filter(pk=event.pk).update(action="tampered")
    with pytest.raises(AuditImmutable):
        AuditEvent.objects.all().delete()
    with pytest.raises(AuditImmutable):
        AuditEvent.objects.filter(pk=event.pk).update_or_create(
            pk=event.pk, defaults={"action": "x"}
        )
    row = AuditEvent.objects.get(pk=event.pk)
    row.action = "tampered"
    with pytest.raises(AuditImmutable):
        AuditEvent.objects.bulk_update([row], ["action"])
    _unchanged(event)
    assert AuditEvent.objects.count() == 1
