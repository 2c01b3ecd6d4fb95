"""Signing in, signing out and a failed sign-in each leave one audit row, written through the
real login form, naming who (or which username was tried, never the password), from which IP
and with which user agent."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.forms.models import model_to_dict

from webapp.audit.models import AuditEvent

pytestmark = pytest.mark.django_db

PASSWORD = "correct-horse-battery"
BROWSER = {"HTTP_USER_AGENT": "Mozilla/5.0 (test browser)", "REMOTE_ADDR": "192.0.2.10"}


@pytest.fixture
def alice():
    return get_user_model().objects.create_user("alice", password=PASSWORD)


def test_a_login_through_the_form_is_audited_with_ip_and_user_agent(client, alice):
    response = client.post("/login/", {"username": "alice", "password": PASSWORD}, **BROWSER)
    assert response.status_code == 302
    row = AuditEvent.objects.get(action="auth.login")
    assert (row.actor_id, row.actor_name) == (alice.pk, "alice")
    assert (row.target_type, row.target_id) == ("user", str(alice.pk))
    assert (row.ip, row.user_agent) == ("192.0.2.10", "Mozilla/5.0 (test browser)")


def test_a_logout_is_audited_as_the_user_who_left(client, alice):
    client.post("/login/", {"username": "alice", "password": PASSWORD}, **BROWSER)
    assert client.post("/logout/", **BROWSER).status_code == 302
    row = AuditEvent.objects.get(action="auth.logout")
    assert (row.actor_id, row.actor_name, row.target_id) == (alice.pk, "alice", str(alice.pk))
    assert (row.ip, row.user_agent) == ("192.0.2.10", "Mozilla/5.0 (test browser)")


def test_a_wrong_password_is_audited_with_the_username_but_not_the_password(client, alice):
    tried = "not-the-password-4711"
    response = client.post("/login/", {"username": "alice", "password": tried}, **BROWSER)
    assert response.status_code == 200 and b"Wrong username or password" in response.content
    row = AuditEvent.objects.get(action="auth.login_failed")
    assert (row.actor_id, row.actor_name) == (None, "anonymous")
    assert (row.target_type, row.target_id) == ("user", str(alice.pk))
    assert row.after == {"username": "alice"}
    assert (row.ip, row.user_agent) == ("192.0.2.10", "Mozilla/5.0 (test browser)")
    assert tried not in repr(model_to_dict(row))
    assert not AuditEvent.objects.filter(action="auth.login").exists()


def test_a_failed_login_of_an_unknown_username_names_it_without_a_target_id(client, alice):
    client.post("/login/", {"username": "mallory", "password": "guess"}, **BROWSER)
    row = AuditEvent.objects.get(action="auth.login_failed")
    assert (row.target_type, row.target_id, row.after) == ("user", "", {"username": "mallory"})


def test_a_logout_without_a_session_writes_no_row(client):
    client.post("/logout/", **BROWSER)
    assert not AuditEvent.objects.filter(action__startswith="auth.").exists()
