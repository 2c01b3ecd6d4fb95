"""CSRF, every route (issue 20 item 5): each unsafe method (POST, PUT, PATCH, DELETE) on every
route of the URL conf, sent with the owner's session cookie and no CSRF token, is refused with
a 403 that names CSRF, and changes no row and no file.

The routes and the methods each takes are ``route_matrix.ROUTE_METHODS``, checked against the
URL conf both ways by ``test_authorization_matrix.py`` (a route that takes no unsafe method
lists ``GET`` alone; here it is asked every unsafe method all the same, and must answer 403 or
405). A listed method is sent with the body the matrix sends, which the matrix shows is
accepted when the token is there: only the missing token refuses it.

API calls authenticated by token are CSRF-free by design (a script has no cookie a page of
another site could ride on): the same unsafe API requests, by token and without any CSRF token,
succeed.
"""

from __future__ import annotations

import pytest
from route_matrix import (
    ALLOWED,
    ROUTE_METHODS,
    ROWS,
    UNSAFE,
    Row,
    assert_answer,
    assert_unchanged,
    body_text,
    client_for,
    registered_routes,
    send,
    snapshot,
    url_of,
)

pytestmark = pytest.mark.django_db


def test_every_registered_route_is_asked():
    assert registered_routes() == set(ROUTE_METHODS)


def _cases():
    for route, methods in ROUTE_METHODS.items():
        for method in UNSAFE:
            yield pytest.param(route, method, method in methods, id=f"{method} {route}")


def _request(route: str, method: str):
    """The matrix's request for (route, method), or a bare one of an unlisted method."""
    for row in ROWS:
        if (row.route, row.method) == (route, method):
            return row
    return Row(route, method, url_of(route), {})


@pytest.mark.parametrize(("route", "method", "listed"), list(_cases()))
def test_a_session_request_without_a_csrf_token_is_refused(
    world, route: str, method: str, listed: bool
):
    client = client_for(world, "owner")  # session cookie, CSRF checks on, no token
    before = snapshot(world)
    for as_json in (False, True):  # a form post, and a script's fetch
        response = send(client, _request(route, method), world, as_json=as_json, csrf="")
        where = f"{method} /{route} (json={as_json}) -> {response.status_code}"
        allowed = (403,) if listed else (403, 405)
        assert response.status_code in allowed, where
        if response.status_code == 403:
            assert "CSRF" in body_text(response), f"{where}: a 403 that is not the CSRF refusal"
    assert_unchanged(before, snapshot(world), f"{method} /{route} without a CSRF token")


def test_the_login_form_needs_a_csrf_token(world):
    """Signed out too: a login post without the token is refused before any password check."""
    client = client_for(world, "anonymous")
    before = snapshot(world)
    response = client.post("/login/", {"username": "alice", "password": "x"})
    assert response.status_code == 403 and "CSRF" in body_text(response)
    assert_unchanged(before, snapshot(world), "POST /login/ without a CSRF token")


TOKEN_ROWS = [row for row in ROWS if row.api and row.method in UNSAFE]


@pytest.mark.parametrize("row", TOKEN_ROWS, ids=lambda row: row.id)
def test_a_token_request_needs_no_csrf_token(world, row, request, settings):
    # launching (a fork or an evaluation too) asks Ray's job server first: a real head's
    if any(word in row.route for word in ("launch", "fork", "evaluations")):
        settings.RAY_ADDRESS = request.getfixturevalue("ray_head").address
    client = client_for(world, "owner", token=True)
    assert "csrftoken" not in client.cookies
    response = send(client, row, world, as_json=True, csrf="")
    assert_answer(response, ALLOWED, row, f"owner token {row.id} without a CSRF token")
