"""The authorization matrix (issue 9, Proof): anonymous / owner / other user / staff × every
page, JSON endpoint and WebSocket route → the expected status, and no data of another user in
any response.

The matrix is checked against the URL conf: every registered route (outside the health,
login/logout and admin URLs, which have their own rules and tests) must have a row here, so a
new route cannot be forgotten. Each row runs on a fresh world:

    alice (owner) — experiment ``main`` (a final run with a checkpoint, a version) and
                    experiment ``busy`` (a queued run, for cancel); an API token
    bob (other)   — his own experiment and run, named with markers that must never appear in
                    alice's responses (and alice's markers never in his)
    root (staff)  — is_staff: sees and acts on all

Expected: anonymous → 302 to the login page (pages) / 401 (API) / WebSocket refused; other →
403 and a ``permission.denied`` audit row naming him; owner and staff → allowed (200 for a
GET; a success for a POST).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from api_helpers import make_run, make_user
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from webapp.accounts.models import ApiToken
from webapp.audit.models import AuditEvent
from webapp.checkpoints.models import Checkpoint, HFStatus
from webapp.experiments.models import Experiment, ExperimentVersion
from webapp.runs.models import Run, RunOrigin, RunStatus

pytestmark = pytest.mark.django_db

ROLES = ("anonymous", "owner", "other", "staff")
DEMO_YAML = Path(settings.RFT_DEMO_CONFIG).read_text()
# Routes with rules of their own: public health, Django's login/logout, the admin (staff plus
# model permissions; E's tests) — the admin index is still a row below.
UNCHECKED = re.compile(r"^(|login/|logout/|health/|health\.json|api/health|admin/.+)$")


@dataclass
class World:
    alice: object
    bob: object
    root: object
    main: Experiment
    busy: Experiment
    run: Run
    queued: Run
    checkpoint: Checkpoint
    converted: Checkpoint
    token: ApiToken
    bob_experiment: Experiment
    bob_run: Run
    terminal: Run  # alice's run registered from a terminal (running)
    job_dir: Path  # an importable job dir inside the allowed roots
    markers: dict[str, list[str]] = field(default_factory=dict)  # role -> must not appear


def _experiment(owner, name: str, description: str) -> Experiment:
    experiment = Experiment.objects.create(
        owner=owner,
        name=name,
        project="matrix",
        description=description,
        config_yaml=DEMO_YAML,
        config=yaml.safe_load(DEMO_YAML),
    )
    ExperimentVersion.objects.create(
        experiment=experiment, number=1, config_yaml=DEMO_YAML, config=experiment.config
    )
    return experiment


@pytest.fixture
def world(tmp_path, settings) -> World:
    settings.RFT_ALLOWED_PATH_ROOTS = [*settings.RFT_ALLOWED_PATH_ROOTS, tmp_path]  # job dirs
    job_dir = tmp_path / "imports" / "old-run"
    (job_dir / "monitor").mkdir(parents=True)
    (job_dir / "config.yaml").write_text(DEMO_YAML)
    (job_dir / "monitor" / "trainer_metrics.jsonl").write_text('{"step": 1, "time": 1.0, "x": 2}\n')
    alice, bob = make_user("alice"), make_user("bob")
    root = make_user("root", staff=True)
    main = _experiment(alice, "alice-main-7f3a", "alice-secret-description-51c9")
    busy = _experiment(alice, "alice-busy-2b8e", "")
    run = make_run(main, status=RunStatus.SUCCEEDED, job_dir=str(tmp_path / "alice-jobdir-c4d1"))
    queued = make_run(busy, status=RunStatus.QUEUED)
    step_dir = tmp_path / "alice-jobdir-c4d1" / "global_step_2"
    (step_dir / "actor").mkdir(parents=True)
    checkpoint = Checkpoint.objects.create(run=run, step=2, path=str(step_dir))
    hf_dir = tmp_path / "alice-jobdir-c4d1" / "global_step_4" / "actor" / "huggingface"
    hf_dir.mkdir(parents=True)
    (hf_dir / "config.json").write_text("{}")
    converted = Checkpoint.objects.create(
        run=run, step=4, path=str(hf_dir.parents[1]), hf_status=HFStatus.READY, hf_path=str(hf_dir)
    )
    token, _ = ApiToken.issue(alice, "alice-token-9e0f")
    bob_experiment = _experiment(bob, "bob-private-91c2", "bob-secret-description-a77d")
    bob_run = make_run(bob_experiment, job_dir="/tmp/bob-jobdir-e5f6")
    terminal = make_run(busy, number=2, status=RunStatus.RUNNING, origin=RunOrigin.TERMINAL)
    alice_markers = ["alice-main-7f3a", "alice-busy-2b8e", "alice-secret-description-51c9",
                     "alice-jobdir-c4d1", run.key, queued.key, "alice-token-9e0f"]  # fmt: skip
    bob_markers = ["bob-private-91c2", "bob-secret-description-a77d", "bob-jobdir-e5f6",
                   bob_run.key]  # fmt: skip
    return World(
        alice=alice, bob=bob, root=root, main=main, busy=busy, run=run, queued=queued,
        checkpoint=checkpoint, converted=converted, token=token, bob_experiment=bob_experiment, bob_run=bob_run,
        terminal=terminal, job_dir=job_dir,
        markers={"owner": bob_markers, "other": alice_markers, "anonymous": alice_markers + bob_markers},
    )  # fmt: skip


# ---------------------------------------------------------------- expectations
LOGIN = "login"  # a 302 to a login page
ALLOWED = "allowed"  # GET: 200; POST: a 2xx or a redirect that is not to a login page
PAGE = {"anonymous": LOGIN, "owner": ALLOWED, "other": 403, "staff": ALLOWED}
PAGE_ANY_USER = {"anonymous": LOGIN, "owner": ALLOWED, "other": ALLOWED, "staff": ALLOWED}
# a page's JSON fetched by its script: signed out, a 403 {"detail"} rather than the login page
PAGE_JSON = {"anonymous": 403, "owner": ALLOWED, "other": 403, "staff": ALLOWED}
API = {"anonymous": 401, "owner": ALLOWED, "other": 403, "staff": ALLOWED}
API_ANY_USER = {"anonymous": 401, "owner": ALLOWED, "other": ALLOWED, "staff": ALLOWED}
ADMIN = {"anonymous": LOGIN, "owner": LOGIN, "other": LOGIN, "staff": ALLOWED}


@dataclass(frozen=True)
class Row:
    route: str  # as registered in the URL conf, converters written <>
    method: str
    url: Callable[[World], str]
    expect: dict
    body: Callable[[World], dict] | None = None

    @property
    def api(self) -> bool:
        return self.route.startswith("api/")

    @property
    def id(self) -> str:
        return f"{self.method} {self.route}"


def _create_body(w: World) -> dict:
    return {"name": "created-by-matrix", "config_yaml": DEMO_YAML}


ROWS = [
    # A: experiments
    Row("experiments/", "GET", lambda w: "/experiments/", PAGE_ANY_USER),
    Row("experiments/new/", "GET", lambda w: "/experiments/new/", PAGE_ANY_USER),
    Row(
        "experiments/form/convert/",
        "POST",
        lambda w: "/experiments/form/convert/",
        PAGE_ANY_USER,
        body=lambda w: {"to": "form", "config_yaml": DEMO_YAML},
    ),  # fmt: skip
    Row("experiments/<>/", "GET", lambda w: f"/experiments/{w.main.pk}/", PAGE),
    Row("experiments/<>/edit/", "GET", lambda w: f"/experiments/{w.main.pk}/edit/", PAGE),
    Row("experiments/<>/yaml/", "GET", lambda w: f"/experiments/{w.main.pk}/yaml/", PAGE),
    Row("experiments/<>/versions/", "GET", lambda w: f"/experiments/{w.main.pk}/versions/", PAGE),
    Row("experiments/<>/clone/", "POST", lambda w: f"/experiments/{w.main.pk}/clone/", PAGE),
    Row("experiments/<>/delete/", "POST", lambda w: f"/experiments/{w.main.pk}/delete/", PAGE),
    # B: runs
    Row("runs/<>/", "GET", lambda w: f"/runs/{w.run.pk}/", PAGE),
    Row("runs/<>/live.json", "GET", lambda w: f"/runs/{w.run.pk}/live.json", PAGE_JSON),
    Row("runs/<>/logs.txt", "GET", lambda w: f"/runs/{w.run.pk}/logs.txt", PAGE),
    Row("runs/compare/", "GET", lambda w: f"/runs/compare/?ids={w.run.pk},{w.queued.pk}", PAGE),
    Row(
        "runs/compare/data.json",
        "GET",
        lambda w: f"/runs/compare/data.json?ids={w.run.pk},{w.queued.pk}",
        PAGE,
    ),  # fmt: skip
    Row("runs/launch/<>/", "POST", lambda w: f"/runs/launch/{w.main.pk}/", PAGE),
    Row("runs/<>/cancel/", "POST", lambda w: f"/runs/{w.queued.pk}/cancel/", PAGE),
    Row("runs/<>/clone/", "POST", lambda w: f"/runs/{w.run.pk}/clone/", PAGE),
    Row("runs/import/", "GET", lambda w: "/runs/import/", PAGE_ANY_USER),
    Row(
        "runs/import/",
        "POST",
        lambda w: "/runs/import/",
        PAGE_ANY_USER,
        body=lambda w: {"job_dir": str(w.job_dir)},
    ),  # fmt: skip
    # C: checkpoints
    Row(
        "checkpoints/<>/convert/",
        "POST",
        lambda w: f"/checkpoints/{w.checkpoint.pk}/convert/",
        PAGE,
    ),
    Row(
        "checkpoints/<>/files.json",
        "GET",
        lambda w: f"/checkpoints/{w.converted.pk}/files.json",
        PAGE,
    ),  # fmt: skip
    # D: account
    Row("account/", "GET", lambda w: "/account/", PAGE_ANY_USER),
    Row(
        "account/tokens/new/",
        "POST",
        lambda w: "/account/tokens/new/",
        PAGE_ANY_USER,
        body=lambda w: {"name": "matrix-token"},
    ),  # fmt: skip
    Row(
        "account/tokens/<>/revoke/", "POST", lambda w: f"/account/tokens/{w.token.pk}/revoke/", PAGE
    ),
    # D: the JSON API
    Row("api/v1/experiments/", "GET", lambda w: "/api/v1/experiments/", API_ANY_USER),
    Row(
        "api/v1/experiments/",
        "POST",
        lambda w: "/api/v1/experiments/",
        API_ANY_USER,
        body=_create_body,
    ),  # fmt: skip
    Row("api/v1/experiments/<>/", "GET", lambda w: f"/api/v1/experiments/{w.main.pk}/", API),
    Row(
        "api/v1/experiments/<>/",
        "PATCH",
        lambda w: f"/api/v1/experiments/{w.main.pk}/",
        API,
        body=lambda w: {"description": "patched by the matrix"},
    ),  # fmt: skip
    Row(
        "api/v1/experiments/<>/launch/",
        "POST",
        lambda w: f"/api/v1/experiments/{w.main.pk}/launch/",
        API,
    ),
    Row("api/v1/runs/", "GET", lambda w: "/api/v1/runs/", API_ANY_USER),
    Row("api/v1/runs/<>/", "GET", lambda w: f"/api/v1/runs/{w.run.pk}/", API),
    Row(
        "api/v1/runs/register/",
        "POST",
        lambda w: "/api/v1/runs/register/",
        API_ANY_USER,
        body=lambda w: {"config_yaml": DEMO_YAML, "job_dir": str(w.job_dir.parent / "new")},
    ),  # fmt: skip
    Row(
        "api/v1/runs/import/",
        "POST",
        lambda w: "/api/v1/runs/import/",
        API_ANY_USER,
        body=lambda w: {"job_dir": str(w.job_dir)},
    ),  # fmt: skip
    Row(
        "api/v1/runs/<>/finish/",
        "POST",
        lambda w: f"/api/v1/runs/{w.terminal.pk}/finish/",
        API,
        body=lambda w: {"exit_code": 0},
    ),  # fmt: skip
    Row("api/v1/runs/<>/cancel/", "POST", lambda w: f"/api/v1/runs/{w.queued.pk}/cancel/", API),
    Row("api/v1/runs/<>/metrics/", "GET", lambda w: f"/api/v1/runs/{w.run.pk}/metrics/", API),
    Row("api/v1/runs/<>/logs/", "GET", lambda w: f"/api/v1/runs/{w.run.pk}/logs/", API),
    Row(
        "api/v1/runs/<>/checkpoints/", "GET", lambda w: f"/api/v1/runs/{w.run.pk}/checkpoints/", API
    ),
    Row(
        "api/v1/checkpoints/<>/convert/",
        "POST",
        lambda w: f"/api/v1/checkpoints/{w.checkpoint.pk}/convert/",
        API,
    ),
    Row("api/v1/schema/", "GET", lambda w: "/api/v1/schema/", API_ANY_USER),
    # the admin index (the admin's own pages: staff with model permissions; E's tests)
    Row("admin/", "GET", lambda w: "/admin/", ADMIN),
]


# ---------------------------------------------------------------- the URL conf
def _routes(patterns, prefix: str = ""):
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern):
            yield route


def normalize(route: str) -> str:
    """``runs/<int:pk>/`` and ``^ws/runs/(?P<run_id>[0-9]+)/$`` as ``runs/<>/``, ``ws/runs/<>/``."""
    route = re.sub(r"\(\?P<\w+>[^)]*\)", "<>", route)
    return re.sub(r"<[^>]+>", "<>", route).lstrip("^").rstrip("$").replace("\\Z", "")


def registered_routes() -> set[str]:
    return {normalize(r) for r in _routes(get_resolver().url_patterns)}


def test_every_registered_route_has_a_row_in_the_matrix():
    covered = {row.route for row in ROWS}
    missing = sorted(r for r in registered_routes() if r not in covered and not UNCHECKED.match(r))
    assert missing == [], f"routes without a row in the authorization matrix: {missing}"


def test_every_row_of_the_matrix_is_a_registered_route():
    registered = registered_routes() | {"admin/"}
    assert sorted(row.route for row in ROWS if row.route not in registered) == []


# ---------------------------------------------------------------- HTTP rows
def _client(world: World, role: str, api: bool) -> Client:
    if role == "anonymous":
        return Client(enforce_csrf_checks=True)
    user = {"owner": world.alice, "other": world.bob, "staff": world.root}[role]
    if api:  # the API by token: what scripts use (session auth is covered in test_api.py)
        _, key = ApiToken.issue(user, f"matrix-{role}")
        return Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    client = Client(enforce_csrf_checks=True)  # pages as a browser meets them
    client.force_login(user)
    return client


def _csrf(client: Client) -> dict:
    """The CSRF token a page embeds (the login page sets the cookie for anyone)."""
    client.get("/login/")
    token = client.cookies["csrftoken"].value if "csrftoken" in client.cookies else ""
    return {"csrfmiddlewaretoken": token}


def _call(client: Client, row: Row, world: World):
    url = row.url(world)
    body = row.body(world) if row.body else {}
    if row.api:
        if row.method == "GET":
            return client.get(url)
        return client.generic(
            row.method, url, data=json.dumps(body), content_type="application/json"
        )
    if row.method == "GET":
        return client.get(url)
    return client.post(url, {**body, **_csrf(client)})


def _assert_status(response, expected, method: str, row: Row, role: str) -> None:
    where = f"{role} {row.id} -> {response.status_code}"
    location = response.get("Location", "")
    if expected == LOGIN:
        assert response.status_code == 302 and "login" in location, where + f" {location}"
    elif expected == ALLOWED:
        if method == "GET":
            assert response.status_code == 200, where
        else:
            ok = response.status_code in (200, 201, 202, 204) or (
                response.status_code in (302, 303) and "login" not in location
            )
            assert ok, where + f" {location} {response.content[:300]!r}"
    else:
        assert response.status_code == expected, where


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_matrix(world, row: Row, role: str, request, settings):
    if "launch" in row.route:  # launching asks Ray's job server first: a real head's
        settings.RAY_ADDRESS = request.getfixturevalue("ray_head").address
    denials_before = AuditEvent.objects.filter(action="permission.denied").count()
    response = _call(_client(world, role, row.api), row, world)
    expected = row.expect[role]
    _assert_status(response, expected, row.method, row, role)
    content = b"".join(response.streaming_content) if response.streaming else response.content
    text = content.decode(errors="replace")
    for marker in world.markers.get(role, []):
        assert marker not in text, f"{role} {row.id}: the response shows {marker!r}"
    if expected == 403 and role == "other":
        denials = AuditEvent.objects.filter(action="permission.denied").order_by("id")
        assert denials.count() == denials_before + 1, f"{role} {row.id}: no permission.denied row"
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
    from webapp.asgi import application

    headers = [(b"host", b"127.0.0.1"), (b"origin", b"http://127.0.0.1")]
    if role != "anonymous":
        user = {"owner": world.alice, "other": world.bob, "staff": world.root}[role]
        client = Client()
        client.force_login(user)
        cookie = (
            f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
        )
        headers.append((b"cookie", cookie.encode()))

    async def scenario():
        communicator = WebsocketCommunicator(application, path, headers=headers)
        connected, code = await communicator.connect(timeout=5)
        if connected:
            await communicator.disconnect()
        return connected, code

    return async_to_sync(scenario)()


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
