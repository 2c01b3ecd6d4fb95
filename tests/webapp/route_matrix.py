"""The route table the authorization and CSRF matrices share (issue 9, issue 20 item 5).

``ROUTE_METHODS`` names every route of the URL conf (converters written ``<>``) with the
methods it takes; a route that takes no unsafe method says so by listing ``GET`` alone.
``ROWS`` holds one concrete request per (route, method), with who may make it. The matrices
check both against the URL conf (``registered_routes`` walks ``get_resolver()`` through every
include), so a new route, or a new method on a route, fails until it has a row here.

Each request runs on a fresh ``World``:

    alice (owner) — experiment ``main`` (a final run with a checkpoint, a version) and
                    experiment ``busy`` (a queued run, for cancel); an API token
    bob (other)   — his own experiment and run, named with markers that must never appear in
                    alice's responses (and alice's markers never in his)
    root (staff)  — is_staff: sees and acts on all

``snapshot`` is the state a refused request must leave as it found: every row of the
project's models and of the users (audit rows other than ``permission.denied``), and every file
under the world's directory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from api_helpers import make_run, make_user
from demo_rows import DEMO_YAML
from django.apps import apps
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from webapp.accounts.models import ApiToken
from webapp.audit.models import AuditEvent
from webapp.checkpoints.models import Checkpoint, HFStatus
from webapp.experiments.models import Experiment, ExperimentVersion
from webapp.runs.claims import runs_area
from webapp.runs.models import Run, RunOrigin, RunStatus

ROLES = ("anonymous", "owner", "other", "staff")
UNSAFE = ("POST", "PUT", "PATCH", "DELETE")
METHODS = ("GET", *UNSAFE)
BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
JSON_ACCEPT = "application/json"
# the admin's own pages (staff with model permissions) are test_admin*.py's; its index is a row
ADMIN_PAGES = re.compile(r"^admin/.+$")


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
    root_dir: Path  # every file the world has is under it
    markers: dict[str, list[str]] = field(default_factory=dict)  # role -> must not appear

    def user(self, role: str):
        return {"owner": self.alice, "other": self.bob, "staff": self.root}[role]


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


def build_world(tmp_path: Path, settings) -> World:
    settings.RFT_ALLOWED_PATH_ROOTS = [*settings.RFT_ALLOWED_PATH_ROOTS, tmp_path]  # job dirs
    job_dir = tmp_path / "imports" / "old-run"
    (job_dir / "monitor").mkdir(parents=True)
    (job_dir / "config.yaml").write_text(DEMO_YAML)
    (job_dir / "monitor" / "trainer_metrics.jsonl").write_text('{"step": 1, "time": 1.0, "x": 2}\n')
    alice, bob = make_user("alice"), make_user("bob")
    root = make_user("root", staff=True)
    # the import and register rows ask for a job dir that no run owns, in a root granted to a
    # group both users are in (webapp/runs/claims.py); whose job dir is whose is
    # test_job_dir_claims.py's matrix
    settings.RFT_RUNS_DIR = tmp_path / "runs"
    settings.RFT_SHARED_RUN_ROOTS = {"team": [str(tmp_path / "imports")]}
    team = Group.objects.create(name="team")
    team.user_set.add(alice, bob)
    alice_dir = runs_area(alice) / "alice-jobdir-c4d1"  # her run's job dir, in her runs area
    main = _experiment(alice, "alice-main-7f3a", "alice-secret-description-51c9")
    busy = _experiment(alice, "alice-busy-2b8e", "")
    run = make_run(main, status=RunStatus.SUCCEEDED, job_dir=str(alice_dir))
    queued = make_run(busy, status=RunStatus.QUEUED)
    step_dir = alice_dir / "global_step_2"
    (step_dir / "actor").mkdir(parents=True)
    (step_dir / ".full_checkpoint").touch()  # a full checkpoint: the fork rows start from it
    checkpoint = Checkpoint.objects.create(run=run, step=2, path=str(step_dir))
    hf_dir = alice_dir / "global_step_4" / "actor" / "huggingface"
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
        terminal=terminal, job_dir=job_dir, root_dir=tmp_path,
        markers={"owner": bob_markers, "other": alice_markers, "anonymous": alice_markers + bob_markers},
    )  # fmt: skip


# ---------------------------------------------------------------- expectations
LOGIN = "login"  # a 302 to the login page
ALLOWED = "allowed"  # GET: 200; otherwise a 2xx or a redirect that is not to the login page
REDIRECT = "redirect"  # a 302 that is not to the login page
PUBLIC = {"anonymous": ALLOWED, "owner": ALLOWED, "other": ALLOWED, "staff": ALLOWED}
HEALTH = {role: (200, 503) for role in ROLES}  # public: up (200) or a service down (503)
HOME = {"anonymous": LOGIN, "owner": REDIRECT, "other": REDIRECT, "staff": REDIRECT}
# a JSON endpoint open to the signed-out: it refuses them itself, as JSON
PAGE_JSON = {"anonymous": (401, 403), "owner": ALLOWED, "other": 403, "staff": ALLOWED}
PAGE = {"anonymous": LOGIN, "owner": ALLOWED, "other": 403, "staff": ALLOWED}
# owner-only, and another user's object is answered as a missing one
HIDDEN = {"anonymous": LOGIN, "owner": ALLOWED, "other": 404, "staff": ALLOWED}
PAGE_ANY_USER = {"anonymous": LOGIN, "owner": ALLOWED, "other": ALLOWED, "staff": ALLOWED}
# the API answers another user's object as a missing one on every endpoint (webapp/api/views.py)
API = {"anonymous": 401, "owner": ALLOWED, "other": 404, "staff": ALLOWED}
API_ANY_USER = {"anonymous": 401, "owner": ALLOWED, "other": ALLOWED, "staff": ALLOWED}
ADMIN = {"anonymous": LOGIN, "owner": LOGIN, "other": LOGIN, "staff": ALLOWED}


def refused(expect) -> bool:
    """Whether an expectation is a refusal (the request must change nothing)."""
    return expect == LOGIN or isinstance(expect, int)


@dataclass(frozen=True)
class Row:
    route: str  # as registered in the URL conf, converters written <>
    method: str
    url: Callable[[World], str]
    expect: dict
    body: Callable[[World], dict] | None = None
    roles: tuple[str, ...] = ROLES  # who asks (all, unless the answer is everyone's alike)
    flavours: tuple[str, ...] | None = None  # how it is asked (default: every way, see tests)

    @property
    def api(self) -> bool:
        return self.route.startswith("api/v1/")

    @property
    def id(self) -> str:
        return f"{self.method} {self.route}"


# the demo's model and data need not exist here: the matrix is about who may, not what
def _create_body(w: World) -> dict:
    return {"name": "created-by-matrix", "config_yaml": DEMO_YAML, "paths_exist_elsewhere": True}


def _form_body(w: World) -> dict:
    return {"experiment.name": "posted-by-matrix", "experiment.project": "matrix",
            "source": "yaml", "config_yaml": DEMO_YAML,
            "experiment.paths_exist_elsewhere": "on"}  # fmt: skip


def _unstaged_yaml() -> str:
    """The demo's config without its stages: the world's checkpoint is of no stage."""
    data = yaml.safe_load(DEMO_YAML)
    data.pop("stages", None)
    return yaml.safe_dump(data, sort_keys=False)


# route -> the methods it takes (GET alone: it takes no unsafe method)
ROUTE_METHODS: dict[str, tuple[str, ...]] = {
    "": ("GET",),
    "login/": ("GET", "POST", "PUT"),  # Django's LoginView takes a PUT as a POST
    "logout/": ("POST",),
    "health/": METHODS,  # a read-only page that does not look at the method
    "health.json": METHODS,
    "api/health": METHODS,
    "experiments/": ("GET",),
    "experiments/new/": ("GET", "POST"),
    "experiments/form/convert/": ("POST",),
    "experiments/<>/": ("GET",),
    "experiments/<>/edit/": ("GET", "POST"),
    "experiments/<>/yaml/": ("GET",),
    "experiments/<>/clone/": ("POST",),
    "experiments/<>/delete/": ("POST",),
    "experiments/<>/versions/": ("GET",),
    "runs/": ("GET",),
    "runs/compare/": ("GET",),
    "runs/compare/data.json": ("GET",),
    "runs/import/": ("GET", "POST"),
    "runs/launch/<>/": ("POST",),
    "runs/<>/": ("GET",),
    "runs/<>/cancel/": ("POST",),
    "runs/<>/live.json": ("GET",),
    "runs/<>/clone/": ("POST",),
    "runs/<>/logs.txt": ("GET",),
    "runs/<>/rollouts/": ("GET",),
    "runs/<>/rollouts.json": ("GET",),
    "checkpoints/<>/convert/": ("POST",),
    "checkpoints/<>/files.json": ("GET",),
    "checkpoints/run/<>/disk.json": ("GET",),
    "runs/<>/metrics.csv": ("GET",),
    "runs/<>/metrics.json": ("GET",),
    "runs/<>/tags/": ("POST",),
    "runs/<>/notes/": ("POST",),
    "checkpoints/<>/hf.tar": ("GET",),
    "runs/<>/evaluations/": ("GET", "POST"),
    "checkpoints/<>/fork/": ("GET", "POST"),
    "account/": ("GET",),
    "account/tokens/new/": ("POST",),
    "account/tokens/<>/revoke/": ("POST",),
    "api/v1/experiments/": ("GET", "POST"),
    "api/v1/experiments/<>/": ("GET", "PATCH"),
    "api/v1/experiments/<>/launch/": ("POST",),
    "api/v1/runs/": ("GET",),
    "api/v1/runs/register/": ("POST",),
    "api/v1/runs/import/": ("POST",),
    "api/v1/runs/<>/": ("GET", "PATCH"),
    "api/v1/runs/<>/finish/": ("POST",),
    "api/v1/runs/<>/cancel/": ("POST",),
    "api/v1/runs/<>/metrics/": ("GET",),
    "api/v1/runs/<>/logs/": ("GET",),
    "api/v1/runs/<>/checkpoints/": ("GET",),
    "api/v1/runs/<>/evaluations/": ("GET", "POST"),
    "api/v1/checkpoints/<>/convert/": ("POST",),
    "api/v1/checkpoints/<>/fork/": ("POST",),
    "api/v1/schema/": ("GET",),
    "api/v1/docs/": ("GET",),
    "admin/": ("GET",),
}

ROWS = [
    # public and sign-in routes
    Row("", "GET", lambda w: "/", HOME),
    Row("login/", "GET", lambda w: "/login/", PUBLIC),
    # a wrong password: the form again with its error, nothing written but the failed-login row
    Row(
        "login/",
        "POST",
        lambda w: "/login/",
        PUBLIC,
        body=lambda w: {"username": "alice", "password": "wrong"},
    ),  # fmt: skip
    Row(
        "login/",
        "PUT",
        lambda w: "/login/",
        PUBLIC,
        body=lambda w: {"username": "alice", "password": "wrong"},
    ),  # fmt: skip
    Row("logout/", "POST", lambda w: "/logout/", HOME),
    # public health (slow: it pings the workers for a second): a signed-in user sees what an
    # anonymous one does, staff may see more; the page ignores the method
    *(
        Row(r, "GET", lambda w, r=r: f"/{r}", HEALTH, roles=("anonymous", "owner", "staff"))
        for r in ("health/", "health.json", "api/health")
    ),
    *(
        Row(r, m, lambda w, r=r: f"/{r}", HEALTH, roles=("anonymous",), flavours=("page",))
        for r in ("health/", "health.json", "api/health")
        for m in UNSAFE
    ),  # fmt: skip
    # A: experiments
    Row("experiments/", "GET", lambda w: "/experiments/", PAGE_ANY_USER),
    Row("experiments/new/", "GET", lambda w: "/experiments/new/", PAGE_ANY_USER),
    Row("experiments/new/", "POST", lambda w: "/experiments/new/", PAGE_ANY_USER, body=_form_body),
    Row(
        "experiments/form/convert/",
        "POST",
        lambda w: "/experiments/form/convert/",
        PAGE_ANY_USER,
        body=lambda w: {"to": "form", "config_yaml": DEMO_YAML},
    ),  # fmt: skip
    Row("experiments/<>/", "GET", lambda w: f"/experiments/{w.main.pk}/", PAGE),
    Row("experiments/<>/edit/", "GET", lambda w: f"/experiments/{w.main.pk}/edit/", PAGE),
    Row(
        "experiments/<>/edit/",
        "POST",
        lambda w: f"/experiments/{w.main.pk}/edit/",
        PAGE,
        body=_form_body,
    ),  # fmt: skip
    Row("experiments/<>/yaml/", "GET", lambda w: f"/experiments/{w.main.pk}/yaml/", PAGE),
    Row("experiments/<>/versions/", "GET", lambda w: f"/experiments/{w.main.pk}/versions/", PAGE),
    Row("experiments/<>/clone/", "POST", lambda w: f"/experiments/{w.main.pk}/clone/", PAGE),
    Row("experiments/<>/delete/", "POST", lambda w: f"/experiments/{w.main.pk}/delete/", PAGE),
    # B: runs
    Row("runs/<>/", "GET", lambda w: f"/runs/{w.run.pk}/", PAGE),
    Row("runs/<>/live.json", "GET", lambda w: f"/runs/{w.run.pk}/live.json", PAGE_JSON),
    # the run table: everyone signed in sees their own runs (staff: all); markers keep bob's out
    Row("runs/", "GET", lambda w: "/runs/", PAGE_ANY_USER),
    # downloads and the owner's tags and notes: another user's run is not even known (404)
    Row("runs/<>/logs.txt", "GET", lambda w: f"/runs/{w.run.pk}/logs.txt", HIDDEN),
    Row("runs/<>/metrics.csv", "GET", lambda w: f"/runs/{w.run.pk}/metrics.csv", HIDDEN),
    Row("runs/<>/metrics.json", "GET", lambda w: f"/runs/{w.run.pk}/metrics.json", HIDDEN),
    Row(
        "runs/<>/tags/",
        "POST",
        lambda w: f"/runs/{w.run.pk}/tags/",
        HIDDEN,
        body=lambda w: {"tags": "matrix-tag"},
    ),  # fmt: skip
    Row(
        "runs/<>/notes/",
        "POST",
        lambda w: f"/runs/{w.run.pk}/notes/",
        HIDDEN,
        body=lambda w: {"notes": "noted by the matrix"},
    ),  # fmt: skip
    Row("runs/<>/rollouts/", "GET", lambda w: f"/runs/{w.run.pk}/rollouts/", PAGE),
    Row("runs/<>/rollouts.json", "GET", lambda w: f"/runs/{w.run.pk}/rollouts.json", PAGE_JSON),
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
    Row("runs/<>/evaluations/", "GET", lambda w: f"/runs/{w.run.pk}/evaluations/", PAGE),
    Row(
        "runs/<>/evaluations/",
        "POST",
        lambda w: f"/runs/{w.run.pk}/evaluations/",
        PAGE,
        body=lambda w: {"checkpoint": w.checkpoint.pk, "taskset": "arithmetic-eval"},
    ),  # fmt: skip
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
    Row(
        "checkpoints/run/<>/disk.json",
        "GET",
        lambda w: f"/checkpoints/run/{w.run.pk}/disk.json",
        PAGE,
    ),
    Row("checkpoints/<>/hf.tar", "GET", lambda w: f"/checkpoints/{w.converted.pk}/hf.tar", HIDDEN),
    Row("checkpoints/<>/fork/", "GET", lambda w: f"/checkpoints/{w.checkpoint.pk}/fork/", PAGE),
    Row(
        "checkpoints/<>/fork/",
        "POST",
        lambda w: f"/checkpoints/{w.checkpoint.pk}/fork/",
        PAGE,
        body=lambda w: {"config_yaml": _unstaged_yaml()},
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
        "api/v1/runs/<>/",
        "PATCH",
        lambda w: f"/api/v1/runs/{w.run.pk}/",
        API,
        body=lambda w: {"tags": ["matrix"], "notes": "noted by the matrix"},
    ),  # fmt: skip
    Row(
        "api/v1/runs/<>/evaluations/", "GET", lambda w: f"/api/v1/runs/{w.run.pk}/evaluations/", API
    ),
    Row(
        "api/v1/runs/<>/evaluations/",
        "POST",
        lambda w: f"/api/v1/runs/{w.run.pk}/evaluations/",
        API,
        body=lambda w: {"checkpoints": [w.checkpoint.pk], "tasksets": ["arithmetic-eval"]},
    ),  # fmt: skip
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
    Row(
        "api/v1/checkpoints/<>/fork/",
        "POST",
        lambda w: f"/api/v1/checkpoints/{w.checkpoint.pk}/fork/",
        API,
        body=lambda w: {"config_yaml": _unstaged_yaml()},
    ),  # fmt: skip
    Row("api/v1/schema/", "GET", lambda w: "/api/v1/schema/", API_ANY_USER),
    Row("api/v1/docs/", "GET", lambda w: "/api/v1/docs/", API_ANY_USER),
    # the admin index (the admin's own pages: staff with model permissions; test_admin*.py)
    Row("admin/", "GET", lambda w: "/admin/", ADMIN),
]


def url_of(route: str) -> Callable[[World], str]:
    """A URL of ``route`` (the first row's)."""
    return next(row.url for row in ROWS if row.route == route)


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
    """Every route of the URL conf, through every include; the admin's own pages left out."""
    routes = {normalize(r) for r in _routes(get_resolver().url_patterns)}
    return {r for r in routes if not ADMIN_PAGES.match(r)}


# ---------------------------------------------------------------- clients and requests
def client_for(world: World, role: str, *, token: bool = False) -> Client:
    """A browser-like client (CSRF enforced) signed in as ``role`` by session, or sending an
    API token of the role's user (``token``; a script's client: no cookies, no CSRF token)."""
    client = Client(enforce_csrf_checks=True)
    if role == "anonymous":
        return client
    user = world.user(role)
    if token:
        _, key = ApiToken.issue(user, f"matrix-{role}")
        client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    else:
        client.force_login(user)
    return client


def csrf_token(client: Client) -> str:
    """The CSRF token a page embeds (the login page sets the cookie for anyone)."""
    client.get("/login/")
    return client.cookies["csrftoken"].value


def body_text(response) -> str:
    content = b"".join(response.streaming_content) if response.streaming else response.content
    return content.decode(errors="replace")


def send(client: Client, row: Row, world: World, *, as_json: bool, csrf: str):
    """The request as the page (a form post), its script (``fetch`` with the CSRF header) or
    an API client (a JSON body) sends it."""
    url = row.url(world)
    headers = {"HTTP_ACCEPT": JSON_ACCEPT if as_json else BROWSER_ACCEPT}
    if row.method == "GET":
        return client.get(url, **headers)
    body = row.body(world) if row.body else {}
    if csrf and (as_json or row.api or row.method != "POST"):
        headers["HTTP_X_CSRFTOKEN"] = csrf
    if row.api:
        data = json.dumps(body)
        return client.generic(row.method, url, data, content_type="application/json", **headers)
    if row.method == "POST":
        return client.post(url, {**body, "csrfmiddlewaretoken": csrf} if csrf else body, **headers)
    return client.generic(row.method, url, **headers)


def assert_answer(response, expected, row: Row, where: str) -> None:
    status, location = response.status_code, response.get("Location", "")
    where = f"{where} -> {status} {location}"
    if expected == LOGIN:
        assert status == 302 and "login" in location, where
    elif expected == REDIRECT:
        assert status == 302 and "login/?" not in location, where
    elif expected == ALLOWED:
        if row.method == "GET":
            assert status == 200, where
        else:
            ok = status in (200, 201, 202, 204) or (
                status in (302, 303) and "login" not in location
            )
            assert ok, where + f" {body_text(response)[:300]!r}"
    elif isinstance(expected, tuple):
        assert status in expected, where
    else:
        assert status == expected, where


# ---------------------------------------------------------------- state
VOLATILE = {"last_login", "last_used"}  # touched by signing in / using a token
SNAPSHOT_APPS = ("auth", "accounts", "audit", "experiments", "runs", "checkpoints", "events")


def snapshot(world: World) -> dict:
    """Every row of the project's models (and the users), and every file under the world's
    directory with its size: what a refused request must leave as it found."""
    rows = {}
    for label in SNAPSHOT_APPS:
        for model in apps.get_app_config(label).get_models():
            queryset = model._default_manager.order_by("pk")
            if model is AuditEvent:
                queryset = queryset.exclude(action="permission.denied")
            values = [
                {k: v for k, v in row.items() if k not in VOLATILE} for row in queryset.values()
            ]
            rows[model._meta.label] = values
            for m2m in model._meta.many_to_many:
                through = m2m.remote_field.through
                rows[through._meta.label] = list(through.objects.order_by("pk").values())
    files = sorted(
        (str(p.relative_to(world.root_dir)), p.stat().st_size if p.is_file() else -1)
        for p in world.root_dir.rglob("*")
    )
    return {"rows": rows, "files": files}


def assert_unchanged(before: dict, after: dict, where: str) -> None:
    for label in sorted(set(before["rows"]) | set(after["rows"])):
        old, new = before["rows"].get(label) or [], after["rows"].get(label) or []
        gone = [row for row in old if row not in new]
        added = [row for row in new if row not in old]
        assert not gone and not added, f"{where} changed {label}: {gone!r} -> {added!r}"
    assert before["files"] == after["files"], f"{where}: a refused request changed files"
