"""API tokens in the admin: listed without their hash, never changed there, and revoked only
through revoke_token (audited as the admin user)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from webapp.accounts.actions import create_token
from webapp.accounts.models import ApiToken
from webapp.audit.models import AuditEvent
from webapp.audit.record import Actor

pytestmark = pytest.mark.django_db

URL = "/admin/accounts/apitoken/"


@pytest.fixture
def alice_token():
    alice = get_user_model().objects.create_user("alice", password="pw-alice-123")
    token, key = create_token(Actor(user=alice), "laptop")
    return token, key


def test_the_token_list_shows_name_owner_and_prefix_but_never_the_hash(client, root, alice_token):
    token, key = alice_token
    body = client.get(URL).text
    assert "laptop" in body and "alice" in body and token.prefix in body
    assert token.key_hash not in body and key not in body
    page = client.get(f"{URL}{token.pk}/change/").text
    assert token.key_hash not in page and key not in page


def test_revoke_in_the_token_list_goes_through_revoke_token(client, root, alice_token):
    token, _ = alice_token
    response = client.post(URL, {"action": "revoke_through_action", "_selected_action": [token.pk]})
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    row = AuditEvent.objects.get(action="token.revoke")
    assert (row.actor_name, row.target_id) == ("root", str(token.pk))


def test_a_token_cannot_be_changed_or_deleted_in_the_admin(client, root, alice_token):
    token, _ = alice_token
    assert client.post(f"{URL}{token.pk}/change/", {"name": "x"}).status_code == 403
    assert client.post(f"{URL}{token.pk}/delete/", {"post": "yes"}).status_code == 403
    assert ApiToken.objects.get(pk=token.pk).name == "laptop"
