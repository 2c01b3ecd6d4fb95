"""One check per service the dashboard depends on: database, Redis, Celery worker, Ray; and
the processes of the stack when supervisord runs it (`make demo`).

Each check returns a :class:`ServiceStatus` with ``up`` and a one-line ``detail`` that says
what answered, or why not and how to start it. Checks never raise and each has a short timeout
(``RFT_PING_TIMEOUT_S``, ``RFT_CELERY_PING_TIMEOUT_S``) so the health page answers even when
everything is down. The details name addresses, paths,
hostnames and versions: the views show them to staff only.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import redis
from django.conf import settings
from django.db import connection


@dataclass
class ServiceStatus:
    name: str
    up: bool
    detail: str
    latency_ms: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def _timed(name: str, probe) -> ServiceStatus:
    start = time.perf_counter()
    try:
        detail = probe()
    except Exception as err:  # noqa: BLE001 - every failure is reported as "down" with its reason
        return ServiceStatus(name, False, _reason(err))
    return ServiceStatus(name, True, detail, round((time.perf_counter() - start) * 1000, 1))


def _reason(err: Exception) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def check_database() -> ServiceStatus:
    def probe() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return f"{connection.vendor} {connection.settings_dict.get('NAME')}"

    status = _timed("database", probe)
    if not status.up:
        status.detail += " — check DATABASE_URL and that the server is running, then `make migrate`"
    return status


def check_redis(url: str | None = None) -> ServiceStatus:
    url = url or settings.REDIS_URL

    def probe() -> str:
        client = redis.Redis.from_url(
            url,
            socket_timeout=settings.RFT_PING_TIMEOUT_S,
            socket_connect_timeout=settings.RFT_PING_TIMEOUT_S,
        )
        try:
            version = client.info("server").get("redis_version", "?")
        finally:
            client.close()
        return f"redis {version} at {_safe_url(url)}"

    status = _timed("redis", probe)
    if not status.up:
        status.detail = f"no answer at {_safe_url(url)} ({status.detail}) — start Redis (`make demo` starts one) or set REDIS_URL"
    return status


def check_celery(redis_status: ServiceStatus | None = None) -> ServiceStatus:
    """Ping the workers over the broker; skipped (down) when the broker itself is down."""
    from webapp.celery import app

    if redis_status is not None and not redis_status.up:
        return ServiceStatus("celery", False, "broker (Redis) is down, so no worker can answer")

    def probe() -> str:
        # Waits the whole timeout to collect every worker's reply: the page lists them all.
        replies = app.control.ping(timeout=settings.RFT_CELERY_PING_TIMEOUT_S)
        if not replies:
            raise RuntimeError("no worker answered the ping")
        names = sorted(name for reply in replies for name in reply)
        return f"{len(names)} worker(s): {', '.join(names)}"

    status = _timed("celery", probe)
    if not status.up:
        status.detail += (
            " — start one with `celery -A workers.celery_app worker` (`make demo` starts one)"
        )
    return status


def ray_dashboard_url(address: str) -> str | None:
    """HTTP address of Ray's job server for ``RAY_ADDRESS``, or None when only TCP can be checked."""
    if address.startswith(("http://", "https://")):
        return address.rstrip("/")
    return None


def ray_auth_headers() -> dict[str, str]:
    """Ray's token auth (on by default since Ray 2.5x): the token Ray's own clients would send,
    from RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token."""
    token = os.environ.get("RAY_AUTH_TOKEN")
    if not token:
        path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH", Path.home() / ".ray" / "auth_token"))
        token = path.read_text().strip() if path.is_file() else ""
    return {"Authorization": f"Bearer {token}"} if token else {}


def check_ray(address: str | None = None) -> ServiceStatus:
    address = address or settings.RAY_ADDRESS

    def probe() -> str:
        http = ray_dashboard_url(address)
        if http:
            request = urllib.request.Request(f"{http}/api/version", headers=ray_auth_headers())
            try:
                with urllib.request.urlopen(
                    request, timeout=settings.RFT_PING_TIMEOUT_S
                ) as response:
                    body = json.loads(response.read() or b"{}")
            except urllib.error.HTTPError as err:
                if err.code in (401, 403):
                    raise RuntimeError(
                        "the job server refused our token; set RAY_AUTH_TOKEN to the cluster's token"
                    ) from err
                raise
            return f"ray {body.get('ray_version', '?')} job server at {http}"
        # ray://host:port (Ray Client) or host:port (GCS): the port answering is what we can check.
        parts = urlsplit(address if "://" in address else f"gcs://{address}")
        with socket.create_connection(
            (parts.hostname, parts.port or 10001), timeout=settings.RFT_PING_TIMEOUT_S
        ):
            pass
        return f"ray at {address} accepts connections"

    status = _timed("ray", probe)
    if not status.up:
        status.detail = (
            f"no answer at {address} ({status.detail}) — start a head with "
            "`ray start --head --num-cpus 2` (`make demo` starts one) or set RAY_ADDRESS"
        )
    return status


def _safe_url(url: str) -> str:
    """The URL without its password, for display."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return parts._replace(netloc=netloc).geturl()
    return url


@dataclass
class SupervisorStatus:
    """The stack's processes under supervisord: ``in_use`` False when this process was not
    started by supervisord (tests; a deployment under systemd or Kubernetes), ``up`` False when
    supervisord does not answer on its socket."""

    in_use: bool
    up: bool
    detail: str
    processes: list = field(default_factory=list)  # webapp.health.supervisor.SupervisedProcess


def check_supervisor() -> SupervisorStatus:
    from webapp.health.supervisor import supervised_processes

    try:
        processes = supervised_processes()
    except Exception as err:  # noqa: BLE001 - a supervisord that does not answer is "down"
        return SupervisorStatus(
            True,
            False,
            f"supervisord does not answer at {os.environ.get('SUPERVISOR_SERVER_URL')} "
            f"({_reason(err)})",
        )
    if processes is None:
        return SupervisorStatus(
            False,
            True,
            "the supervisor is not in use: this web process was not started by supervisord "
            "(`make demo` starts one), so restarts are up to what runs this deployment",
        )
    return SupervisorStatus(
        True,
        True,
        f"supervisord at {os.environ.get('SUPERVISOR_SERVER_URL')}: {len(processes)} processes",
        processes,
    )


def check_all() -> list[ServiceStatus]:
    redis_status = check_redis()
    return [check_database(), redis_status, check_celery(redis_status), check_ray()]
