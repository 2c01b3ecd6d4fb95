"""Rows and clients the API, token, matrix and fuzz tests share (helper D's tests).

Rows are written with the ORM only where a test needs an existing object to read; every state
change a test is about goes through the API or the page under test.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.test import Client

from webapp.accounts.models import ApiToken
from webapp.checkpoints.models import Checkpoint
from webapp.experiments.models import Experiment, Tag
from webapp.runs.models import Run, RunStatus

MINIMAL_YAML = "project: api-tests\nname: minimal\n"


def make_user(username: str, *, staff: bool = False):
    """A user without a usable password (tests sign in with force_login: no slow hashing)."""
    return get_user_model().objects.create_user(username, password=None, is_staff=staff)


def make_experiment(owner, name: str, *, project: str = "proj", tags=(), description: str = ""):
    experiment = Experiment.objects.create(
        owner=owner,
        name=name,
        project=project,
        description=description,
        config_yaml=MINIMAL_YAML,
        config={"project": "api-tests", "name": "minimal"},
    )
    for tag in tags:
        experiment.tags.add(Tag.objects.get_or_create(name=tag)[0])
    return experiment


def make_run(experiment, *, number: int = 1, status: str = RunStatus.SUCCEEDED, **fields) -> Run:
    """A run of ``experiment`` (its current config) that becomes the experiment's last run."""
    fields.setdefault("config", experiment.config)
    run = Run.objects.create(
        experiment=experiment,
        number=number,
        status=status,
        config_yaml=experiment.config_yaml,
        **fields,
    )
    Experiment.objects.filter(pk=experiment.pk).update(last_run=run)
    return run


def make_checkpoint(run: Run, *, step: int = 2) -> Checkpoint:
    return Checkpoint.objects.create(
        run=run, stage="", step=step, path=f"/nowhere/global_step_{step}"
    )


def token_client(user, name: str = "tests") -> tuple[Client, str]:
    """A client that sends ``Authorization: Bearer <key>`` of a new token of ``user``."""
    _, key = ApiToken.issue(user, name)
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}"), key


def session_client(user, *, csrf: bool = True) -> Client:
    """A signed-in browser-like client; ``csrf`` enforces Django's CSRF check (as browsers meet it)."""
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def csrf_token_of(client: Client) -> str:
    """The CSRF token a page would embed (GET a page to have the cookie set)."""
    client.get("/account/")
    return client.cookies["csrftoken"].value


def task_callbacks(callbacks: list) -> list:
    """The on-commit callbacks that enqueue a Celery task, without the live pages' pushes
    (``webapp.runs.live.publish_run`` / ``webapp.checkpoints.actions.publish_checkpoint`` register one each)."""
    return [cb for cb in callbacks if not cb.__qualname__.startswith("publish_")]


def ingest_stream(redis_url: str, redis_client, run_key: str) -> None:
    """Everything on ``run_key``'s event stream stored by a real ingestor (a consumer group of
    its own, only that run), then the run forgotten by the deployment's run set."""
    import redis

    from rft_core.monitor import runs_set
    from workers.ingestor import Ingestor

    ingestor = Ingestor(
        redis.Redis.from_url(redis_url), "c", group=f"g-{run_key}", only_runs={run_key}
    )
    try:
        while ingestor.poll(block_ms=100):
            pass
    finally:
        redis_client.srem(runs_set(), run_key)
