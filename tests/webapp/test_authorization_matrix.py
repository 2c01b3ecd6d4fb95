"""The authorization matrix (issue 9, issue 20 item 5): anonymous / owner / other user / staff ×
every route of the URL conf × every method it takes × how it is asked → the expected answer,
nothing changed by a refused request, and no data of another user in any response.

Every request goes out as a page (a browser's Accept) and with ``Accept: application/json``
(the pages' own fetches: the run page's Cancel and Convert buttons, its live data); an API
route is also asked both by token and by session (with its CSRF token). The route table
(``route_matrix.py``) is checked against the URL conf both ways, and so are the methods: a route
answers 405 to every method the table does not list for it.

Expected: anonymous → 302 to the login page (a page) / a JSON 401 or 403 (asked for JSON, and
the API); other → 403 (pages) or 404 (the API, and the pages that hide an object: downloads,
tags, notes), each with one ``permission.denied`` audit row naming him, and every row and file
as it was; owner and staff → allowed (200 for a GET; a success for the other methods).
"""

from __future__ import annotations

import json

import pytest
from route_matrix import (
    LOGIN,
    METHODS,
    ROLES,
    ROUTE_METHODS,
    ROWS,
    Row,
    World,
    assert_answer,
    assert_unchanged,
    body_text,
    client_for,
    csrf_token,
    normalize,
    refused,
    registered_routes,
    send,
    snapshot,
    url_of,
)
from websocket_session import HOST, connect, session_headers

from webapp.audit.models import AuditEvent

pytestmark = pytest.mark.django_db

PAGE_FLAVOURS = ("page", "json")  # session; Accept of a browser / application/json
API_FLAVOURS = ("token", "token+json", "session", "session+json")
ANONYMOUS_JSON = (401, 403)  # a signed-out fetch: a JSON refusal, never the login page


# ---------------------------------------------------------------- the URL conf, both ways
def test_every_registered_route_is_in_the_matrix():
    missing = sorted(registered_routes() - set(ROUTE_METHODS))
    assert missing == [], f"routes without a row in the authorization matrix: {missing}"


def test_every_route_of_the_matrix_is_registered():
    assert sorted(set(ROUTE_METHODS) - registered_routes()) == []


def test_every_method_of_every_route_has_a_row():
    listed = {(route, m) for route, methods in ROUTE_METHODS.items() for m in methods}
    rows = {(row.route, row.method) for row in ROWS}
    assert sorted(listed - rows) == [], "methods the table lists without a request in ROWS"
    assert sorted(rows - listed) == [], "requests in ROWS of a method the table does not list"


def _unlisted_methods():
    for route, methods in ROUTE_METHODS.items():
        if route == "admin/":  # Django's admin: test_admin*.py
            continue
        for method in METHODS:
            if method not in methods:
                yield pytest.param(route, method, id=f"{method} {route}")


@pytest.mark.parametrize(("route", "method"), list(_unlisted_methods()))
def test_a_route_answers_405_to_a_method_it_does_not_list(world, route: str, method: str):
    """What keeps ``ROUTE_METHODS`` true: a method it leaves out is refused by the route."""
    api = route.startswith("api/v1/")
    client = client_for(world, "owner", token=api)
    headers = {} if api or method == "GET" else {"HTTP_X_CSRFTOKEN": csrf_token(client)}
    before = snapshot(world)
    response = client.generic(method, url_of(route)(world), **headers)
    assert response.status_code == 405, f"{method} /{route} -> {response.status_code}"
    assert_unchanged(before, snapshot(world), f"{method} /{route}")


# ---------------------------------------------------------------- HTTP rows
def _cases():
    for row in ROWS:
        for flavour in row.flavours or (API_FLAVOURS if row.api else PAGE_FLAVOURS):
            for role in row.roles:
                yield pytest.param(row, flavour, role, id=f"{row.id}-{flavour}-{role}")


def expectation(row: Row, role: str, as_json: bool):
    expected = row.expect[role]
    if expected == LOGIN and as_json and role == "anonymous":
        return ANONYMOUS_JSON
    return expected


@pytest.mark.parametrize(("row", "flavour", "role"), list(_cases()))
def test_matrix(world, row: Row, flavour: str, role: str, request, settings):
    # launching (a fork or an evaluation too) asks Ray's job server first: a real head's
    if any(word in row.route for word in ("launch", "fork", "evaluations")):
        settings.RAY_ADDRESS = request.getfixturevalue("ray_head").address
    as_json = flavour.endswith("json")
    client = client_for(world, role, token=flavour.startswith("token"))
    session_write = row.method != "GET" and not flavour.startswith("token")
    csrf = csrf_token(client) if session_write else ""
    expected = expectation(row, role, as_json)
    where = f"{role} {flavour} {row.id}"
    denials_before = AuditEvent.objects.filter(action="permission.denied").count()
    before = snapshot(world) if refused(expected) else None

    response = send(client, row, world, as_json=as_json, csrf=csrf)

    assert_answer(response, expected, row, where)
    text = body_text(response)
    for marker in world.markers.get(role, []):
        assert marker not in text, f"{where}: the response shows {marker!r}"
    if refused(expected):
        assert_unchanged(before, snapshot(world), where)
    if refused(expected) and expected != LOGIN and as_json:
        assert response["Content-Type"].startswith("application/json"), f"{where}: not JSON"
        assert "detail" in json.loads(text), f"{where}: {text[:200]}"
    denials = AuditEvent.objects.filter(action="permission.denied").order_by("id")
    # every refusal of another user's existing object is audited, a 403 and a 404 alike
    if role == "other" and response.status_code in (403, 404):
        assert denials.count() == denials_before + 1, f"{where}: no permission.denied row"
        assert denials.last().actor_name == "bob"


# ---------------------------------------------------------------- the WebSocket routes
# normalized route -> (path, who is accepted); a refused connect closes with 4403
WS_ROWS = {
    "ws/runs/<>/": (lambda w: f"/ws/runs/{w.run.pk}/", {"owner", "staff"}),  # one run's events
    "ws/runs/": (lambda w: "/ws/runs/", {"owner", "other", "staff"}),  # the list feed (own runs)
}


def test_every_websocket_route_is_checked():
    from webapp.asgi import websocket_urlpatterns

    assert sorted(normalize(str(p.pattern)) for p in websocket_urlpatterns) == sorted(WS_ROWS)


def _ws_connect(world: World, role: str, path: str) -> tuple[bool, int | None]:
    if role == "anonymous":
        return connect(path, HOST)
    user = {"owner": world.alice, "other": world.bob, "staff": world.root}[role]
    return connect(path, session_headers(user))


@pytest.mark.django_db(transaction=True)  # the consumer reads the database from another thread
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("route", sorted(WS_ROWS))
def test_websocket_matrix(world, route: str, role: str):
    path, accepted = WS_ROWS[route]
    denials_before = AuditEvent.objects.filter(action="permission.denied").count()
    connected, code = _ws_connect(world, role, path(world))
    assert connected is (role in accepted), f"{role} {route}: connected={connected} code={code}"
    if role not in accepted:
        assert code == 4403
    if role == "other" and role not in accepted:
        denials = AuditEvent.objects.filter(action="permission.denied")
        assert denials.count() == denials_before + 1, f"{role} {route}: no permission.denied row"


@pytest.mark.django_db(transaction=True)
def test_websocket_refuses_a_run_that_does_not_exist(world):
    connected, _ = _ws_connect(world, "owner", "/ws/runs/999999/")
    assert connected is False
