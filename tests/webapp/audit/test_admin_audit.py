"""The audit trail in the admin is read-only for everyone, superusers included: the list and
the change page show a row (its before/after JSON readable), and every POST that would add,
change or delete one is refused with the row left as it was."""

from __future__ import annotations

import pytest

from webapp.audit.models import AuditEvent
from webapp.audit.record import Actor, record

pytestmark = pytest.mark.django_db


@pytest.fixture
def event(root) -> AuditEvent:
    return record(
        Actor(user=root, ip="10.0.0.9", user_agent="pytest"),
        "experiment.update",
        target_type="experiment",
        target_id=42,
        before={"name": "old name"},
        after={"name": "new name", "tags": ["gsm8k"]},
    )


def _as_written(event: AuditEvent) -> None:
    row = AuditEvent.objects.get(pk=event.pk)
    assert (row.action, row.actor_name, row.target_id) == ("experiment.update", "root", "42")
    assert row.after == {"name": "new name", "tags": ["gsm8k"]}
    # force_login wrote the superuser's auth.login row; nothing else was added.
    assert AuditEvent.objects.exclude(action="auth.login").count() == 1


def test_it_lists_audit_rows_with_filters_and_search(client, event):
    page = client.get("/admin/audit/auditevent/", {"q": "root"})
    assert page.status_code == 200
    body = page.content.decode()
    assert "experiment.update" in body and "10.0.0.9" in body
    assert "By action" in body and "By target type" in body
    assert client.get("/admin/audit/auditevent/", {"q": "nobody"}).content.count(b"10.0.0.9") == 0


def test_it_shows_before_and_after_as_indented_json(client, event):
    page = client.get(f"/admin/audit/auditevent/{event.pk}/change/")
    assert page.status_code == 200
    body = page.content.decode()
    assert "<pre" in body and "&quot;name&quot;: &quot;new name&quot;" in body
    assert '<input type="submit" value="Save"' not in body  # a view page, no save button


def test_it_refuses_a_superuser_changing_a_row(client, event):
    response = client.post(
        f"/admin/audit/auditevent/{event.pk}/change/",
        {"action": "tampered", "actor_name": "someone", "target_id": "1"},
    )
    assert response.status_code == 403
    _as_written(event)


def test_it_refuses_a_superuser_deleting_a_row(client, event):
    assert client.get(f"/admin/audit/auditevent/{event.pk}/delete/").status_code == 403
    response = client.post(f"/admin/audit/auditevent/{event.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    _as_written(event)


def test_it_offers_no_bulk_delete_and_refuses_one_posted(client, event):
    page = client.get("/admin/audit/auditevent/")
    assert b"delete_selected" not in page.content
    response = client.post(
        "/admin/audit/auditevent/",
        {"action": "delete_selected", "_selected_action": [event.pk], "post": "yes"},
    )
    assert response.status_code in (200, 302)  # the changelist again, nothing done
    _as_written(event)


def test_it_refuses_a_superuser_adding_a_row(client, event):
    assert client.get("/admin/audit/auditevent/add/").status_code == 403
    response = client.post("/admin/audit/auditevent/add/", {"action": "forged", "actor_name": "x"})
    assert response.status_code == 403
    _as_written(event)
