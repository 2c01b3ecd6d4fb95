"""Login is required everywhere but the health endpoints."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice():
    return get_user_model().objects.create_user("alice", password="correct-horse-battery")


def test_it_redirects_anonymous_home_to_login(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response.url == "/login/?next=/"


def test_it_redirects_anonymous_admin_to_login(client):
    assert client.get("/admin/").status_code == 302


def test_home_redirects_to_the_experiment_list(client, alice):
    client.force_login(alice)
    response = client.get("/")
    assert response.status_code == 302 and response.url == "/experiments/"


def test_it_logs_in_with_the_right_password_and_shows_the_user(client, alice):
    response = client.post("/login/", {"username": "alice", "password": "correct-horse-battery"})
    assert response.status_code == 302 and response.url == "/"
    page = client.get("/", follow=True)
    assert page.redirect_chain == [("/experiments/", 302)]
    assert page.status_code == 200
    assert b'<span class="who">alice</span>' in page.content


def test_it_rejects_a_wrong_password(client, alice):
    response = client.post("/login/", {"username": "alice", "password": "wrong"})
    assert response.status_code == 200
    assert b"Wrong username or password" in response.content
    assert client.get("/experiments/").status_code == 302


def test_it_logs_out_with_post(client, alice):
    client.force_login(alice)
    assert client.get("/experiments/").status_code == 200
    response = client.post("/logout/")
    assert response.status_code == 302 and response.url == "/login/"
    assert client.get("/experiments/").status_code == 302


def test_health_is_public(client):
    assert client.get("/health.json").status_code in (200, 503)
    assert client.get("/health/").status_code in (200, 503)
