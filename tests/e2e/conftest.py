"""Browser-test fixtures: a real daphne serving the site on a free port with its own SQLite
database and demo login, and a Playwright page in Debian's chromium (never a downloaded browser)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis_claim import CLAIM_KEY, claim_db

from tests.e2e.live_page import log_in
from workers.services import free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


@dataclass
class LiveSite:
    url: str
    username: str
    password: str
    env: dict[str, str]

    def manage(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        )


@pytest.fixture(scope="session")
def live_site(tmp_path_factory, redis_url) -> LiveSite:
    var = tmp_path_factory.mktemp("site-var")
    port = free_port()
    env = {
        **os.environ,
        "RFT_VAR_DIR": str(var),
        "DATABASE_URL": f"sqlite:///{var / 'db.sqlite3'}",
        "REDIS_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
    }
    fields = _prepare_site(env, var, "e2e")
    log = open(var / "daphne.log", "wb")  # noqa: SIM115 - closed after the server stops
    server = subprocess.Popen(
        daphne_command(port),
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{url}/health.json", server, var / "daphne.log")
        yield LiveSite(url=url, username=fields["username"], password=fields["password"], env=env)
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()


def _prepare_site(env: dict[str, str], var: Path, username: str) -> dict[str, str]:
    """Migrate the site's database and create its demo superuser; the login's fields."""
    login_file = var / "login.txt"
    for args in (
        ["migrate", "--noinput", "-v", "0"],
        ["ensure_demo_user", "--username", username, "--login-file", str(login_file)],
    ):
        subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True
        )
    return dict(line.split(": ", 1) for line in login_file.read_text().splitlines())


def daphne_command(port: int) -> list[str]:
    """The command line of daphne serving the site on 127.0.0.1:``port``."""
    return [
        sys.executable,
        "-m",
        "daphne",
        "-b",
        "127.0.0.1",
        "-p",
        str(port),
        "webapp.asgi:application",
    ]


def _wait_http(url: str, server: subprocess.Popen, log_path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(
                f"daphne exited ({server.returncode}):\n{log_path.read_text()[-2000:]}"
            )
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return  # it answered
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"daphne did not answer at {url} within {timeout} s")


@pytest.fixture
def browser():
    """Per test: Playwright's sync API keeps an event loop on the main thread while it runs,
    which would break async_to_sync in every later test of the session."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `apt-get install -y chromium` (.ci/run does it)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()


@pytest.fixture
def logged_in_page(page, live_site):
    """A page already signed in as the site's demo user (through the real login form)."""
    page.goto(f"{live_site.url}/login/")
    log_in(page, live_site)  # home is the experiment list
    return page


# ------------------------------------------------------------------ the whole stack (helper E)


@dataclass
class Stack:
    """Every process of the dashboard, started for one test: daphne, a Celery worker on a queue
    of its own, the event ingestor in a consumer group of its own, on one database, one Redis
    and a Ray head of the test's."""

    url: str
    username: str
    password: str
    env: dict[str, str]
    var: Path
    processes: dict[str, subprocess.Popen]

    def log(self, name: str) -> str:
        path = self.var / "log" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logs_tail(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {name}\n{self.log(name)[-chars:]}" for name in self.processes)

    def check_alive(self) -> None:
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited ({proc.returncode}):\n{self.log(name)[-3000:]}")


def _database_for(var: Path, name: str):
    """A database of the stack's own: a SQLite file, or (DATABASE_URL on PostgreSQL) a new
    PostgreSQL database on that server, dropped after. Yields its URL."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        yield f"sqlite:///{var / 'db.sqlite3'}"
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{url.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _start(var: Path, name: str, cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    log = open(var / "log" / f"{name}.log", "wb")  # noqa: SIM115 - the child keeps it open
    try:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    finally:
        log.close()


def _stop(processes: dict[str, subprocess.Popen]) -> None:
    for proc in reversed(list(processes.values())):
        if proc.poll() is None:
            proc.terminate()
    for proc in processes.values():
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _forget_run_streams(env: dict[str, str]) -> None:
    """Delete the streams of the stack's runs (and their entries in the runs set), its queue's
    bindings and its claim on the database index."""
    import redis

    from rft_core.monitor import runs_set, stream_key

    keys = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "shell",
            "-c",
            "from webapp.runs.models import Run; print(*Run.objects.values_list('key', flat=True))",
        ],  # fmt: skip
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    ).stdout.split()
    client = redis.Redis.from_url(env["REDIS_URL"])
    prefix = env["RFT_REDIS_PREFIX"]
    if keys:
        client.delete(*[stream_key(key, prefix) for key in keys])
        client.srem(runs_set(prefix), *keys)
    queue, namespace = env["RFT_RUNS_QUEUE"], f"rft:{prefix}:"
    client.delete(
        f"{namespace}_kombu.binding.{queue}", f"{namespace}_kombu.binding_permanent.{queue}"
    )
    client.delete(CLAIM_KEY)
    client.close()


@pytest.fixture
def stack(tmp_path, redis_url, ray_head, unique_id) -> Stack:
    """The whole dashboard for one test (see ``Stack``), with the demo model and data of
    ``trinity init-demo`` in the test's tmp dir (``RFT_DEMO_DIR``) and a demo superuser."""
    from celery import Celery

    var = tmp_path / "var"
    (var / "log").mkdir(parents=True)
    demo = tmp_path / "demo"
    bin_dir = Path(sys.executable).parent
    subprocess.run(
        [str(bin_dir / "trinity"), "init-demo", "--out", str(demo)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    queue = f"q-{unique_id}"
    databases = _database_for(var, f"rft_e2e_{unique_id}")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "RFT_VAR_DIR": str(var),
        "DATABASE_URL": next(databases),
        # a database index of its own: the stack's ingestor reads every run stream it finds and
        # must not meet other sessions' streams
        "REDIS_URL": claim_db(redis_url, unique_id),
        "RAY_ADDRESS": ray_head.address,
        "RFT_DEMO_DIR": str(demo),
        "RFT_RUNS_DIR": str(tmp_path / "runs"),
        "RFT_RUNS_QUEUE": queue,
        "RFT_CONVERT_QUEUE": queue,  # the Convert button's task reaches the stack's worker
        "RFT_INGESTOR_GROUP": f"ingestor-{unique_id}",
        # a deployment of its own: its keys, streams and live channels meet nobody else's
        "RFT_REDIS_PREFIX": f"e2e-{unique_id}",
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
    }
    env.pop("RFT_ALLOWED_PATH_ROOTS", None)  # the defaults: the demo dir and the runs dir
    port = free_port()
    worker = f"{unique_id}@{_hostname()}"
    processes: dict[str, subprocess.Popen] = {}
    try:
        fields = _prepare_site(env, var, "e2e")
        processes["worker"] = _start(
            var,
            "worker",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "workers.celery_app",
                "worker",
                "--pool",
                "solo",
                "-Q",
                queue,
                "-n",
                f"{unique_id}@%h",
                "--loglevel",
                "INFO",
                "--without-gossip",
                "--without-mingle",
            ],  # fmt: skip
            env,
        )
        processes["ingestor"] = _start(
            var,
            "ingestor",
            [sys.executable, "-m", "workers.ingestor", "--consumer", f"e2e-{unique_id}"],
            env,
        )
        processes["web"] = _start(var, "web", daphne_command(port), env)
        url = f"http://127.0.0.1:{port}"
        _wait_http(f"{url}/health.json", processes["web"], var / "log" / "web.log")
        deadline = time.monotonic() + 60
        # the stack's broker and prefix, not this process's
        app = Celery(
            broker=env["REDIS_URL"],
            broker_transport_options={"global_keyprefix": f"rft:{env['RFT_REDIS_PREFIX']}:"},
        )
        while not app.control.ping(destination=[worker], timeout=0.5):
            if processes["worker"].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "celery worker did not answer a ping:\n"
                    + (var / "log" / "worker.log").read_text()[-3000:]
                )
        site = Stack(url, fields["username"], fields["password"], env, var, processes)
        site.check_alive()
        yield site
    finally:
        _stop(processes)
        _forget_run_streams(env)
        databases.close()


def _hostname() -> str:
    import socket

    return socket.gethostname()
