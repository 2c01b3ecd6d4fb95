"""API tokens: created and revoked on /account/, shown once, stored hashed, audited; Bearer and
Token headers authenticate; revoked, unknown and malformed keys are refused with 401."""

from __future__ import annotations

import hashlib
import re

import pytest
from api_helpers import csrf_token_of, make_experiment, make_user, session_client
from django.test import Client

from webapp.accounts.actions import create_token, revoke_token
from webapp.accounts.models import ApiToken
from webapp.audit.models import AuditEvent
from webapp.audit.record import Actor
from webapp.errors import ActionError

pytestmark = pytest.mark.django_db

KEY_RE = re.compile(r'<pre id="new-token-key">(rft_[A-Za-z0-9_-]+)</pre>')


def _create_on_page(client: Client, name: str):
    return client.post(
        "/account/tokens/new/", {"name": name, "csrfmiddlewaretoken": csrf_token_of(client)}
    )


def test_it_shows_a_new_key_once_and_stores_only_its_hash(alice):
    client = session_client(alice)
    response = _create_on_page(client, "laptop")
    assert response.status_code == 302 and response.url == "/account/"
    page = client.get("/account/").content.decode()
    key = KEY_RE.search(page).group(1)
    token = ApiToken.objects.get(user=alice)
    assert token.name == "laptop"
    assert token.key_hash == hashlib.sha256(key.encode()).hexdigest()
    assert key.startswith(token.prefix) and len(token.prefix) == 12
    assert key not in str(ApiToken.objects.filter(pk=token.pk).values().get())
    again = client.get("/account/").content.decode()
    assert key not in again and token.prefix in again


def test_it_refuses_a_token_create_without_the_csrf_token(alice):
    client = session_client(alice)
    response = client.post("/account/tokens/new/", {"name": "laptop"})
    assert response.status_code == 403
    assert not ApiToken.objects.exists()


def test_it_audits_create_and_revoke_without_the_key(alice):
    client = session_client(alice)
    _create_on_page(client, "ci")
    key = KEY_RE.search(client.get("/account/").content.decode()).group(1)
    token = ApiToken.objects.get(user=alice)
    response = client.post(
        f"/account/tokens/{token.pk}/revoke/", {"csrfmiddlewaretoken": csrf_token_of(client)}
    )
    assert response.status_code == 302
    rows = list(AuditEvent.objects.filter(action__startswith="token.").order_by("id"))
    assert [(r.action, r.actor_name, r.target_type, r.target_id) for r in rows] == [
        ("token.create", "alice", "apitoken", str(token.pk)),
        ("token.revoke", "alice", "apitoken", str(token.pk)),
    ]
    for row in rows:
        assert key not in str(row.before) + str(row.after)
        assert token.key_hash not in str(row.before) + str(row.after)
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert "revoked" in client.get("/account/").content.decode()


@pytest.mark.parametrize("scheme", ["Bearer", "Token", "bearer"])
def test_it_authenticates_api_calls_with_the_key(alice, scheme):
    make_experiment(alice, "alices-experiment")
    _, key = create_token(Actor(user=alice), "script")
    response = Client().get("/api/v1/experiments/", HTTP_AUTHORIZATION=f"{scheme} {key}")
    assert response.status_code == 200
    assert [e["name"] for e in response.json()["results"]] == ["alices-experiment"]
    assert ApiToken.objects.get(user=alice).last_used is not None


def test_it_refuses_a_revoked_token(alice):
    token, key = create_token(Actor(user=alice), "old")
    revoke_token(Actor(user=alice), token)
    response = Client().get("/api/v1/experiments/", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 401
    assert response.json()["detail"] == "unknown or revoked API token"


@pytest.mark.parametrize(
    "header",
    ["Bearer rft_not-a-key", "Bearer", "Bearer two parts", "Token \u00e9\u00e9"],
)
def test_it_refuses_unknown_or_malformed_keys(alice, header):
    response = Client().get("/api/v1/experiments/", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_it_refuses_the_token_of_an_inactive_user(alice):
    _, key = create_token(Actor(user=alice), "script")
    alice.is_active = False
    alice.save()
    response = Client().get("/api/v1/experiments/", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert response.status_code == 401


def test_it_needs_no_csrf_token_with_a_token(alice):
    _, key = create_token(Actor(user=alice), "script")
    client = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Bearer {key}")
    response = client.post("/api/v1/experiments/", {}, content_type="application/json")
    assert response.status_code == 400  # past auth and CSRF: the body is what is refused
    assert response.json()["errors"]["name"] == "This field is required."


def test_it_refuses_another_users_revoke_and_audits_it(alice):
    bob = make_user("bob")
    token, _ = create_token(Actor(user=alice), "alices")
    client = session_client(bob)
    response = client.post(
        f"/account/tokens/{token.pk}/revoke/", {"csrfmiddlewaretoken": csrf_token_of(client)}
    )
    assert response.status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is None
    denial = AuditEvent.objects.get(action="permission.denied")
    assert (denial.actor_name, denial.target_type, denial.target_id) == (
        "bob",
        "apitoken",
        str(token.pk),
    )
    assert "alices" not in client.get("/account/").content.decode()


def test_it_rejects_a_blank_or_duplicate_name_beside_the_field(alice):
    client = session_client(alice)
    response = _create_on_page(client, "   ")
    assert response.status_code == 400
    assert 'id="error-name">this field is required<' in response.content.decode()
    _create_on_page(client, "dup")
    response = _create_on_page(client, "dup")
    assert response.status_code == 409
    assert ApiToken.objects.filter(user=alice).count() == 1
    assert AuditEvent.objects.filter(action="token.create").count() == 1


def test_it_refuses_to_revoke_twice(alice):
    token, _ = create_token(Actor(user=alice), "once")
    revoke_token(Actor(user=alice), token)
    with pytest.raises(ActionError) as err:
        revoke_token(Actor(user=alice), token)
    assert err.value.status == 409
    assert AuditEvent.objects.filter(action="token.revoke").count() == 1


def test_it_lists_several_tokens_of_a_user(alice):
    for name in ("one", "two", "three"):
        create_token(Actor(user=alice), name)
    page = session_client(alice).get("/account/").content.decode()
    assert all(f"<td>{name}</td>" in page for name in ("one", "two", "three"))
