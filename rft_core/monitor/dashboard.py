"""A terminal's ``trinity run`` that shows up live in an RFT Studio dashboard.

    export RFT_DASHBOARD_URL=http://127.0.0.1:8000   # the dashboard's address
    export RFT_API_TOKEN=rft_...                      # a personal token (the dashboard's /account/)
    trinity run --config my.yaml

With both set, ``register`` registers the run once its job dir is final and its preflight
passed, before Ray starts (``POST /api/v1/runs/register/`` with the config as it resolved and
the job dir), sets
``RFT_EVENTS_REDIS_URL``, ``RFT_REDIS_PREFIX`` (the dashboard's deployment prefix) and
``RFT_RUN_ID`` from the answer, so the run's monitor streams to the
dashboard as a run the dashboard launched would, and ``reporting`` reports the exit code when
the run ends (``POST /api/v1/runs/<id>/finish/``). A dashboard that refuses or cannot be reached stops the
run before it starts, naming which and why (unset RFT_DASHBOARD_URL to run without it); a
finish report that fails only warns (the dashboard marks the run lost when its heartbeats
stop). Inside a run the dashboard launched (``RFT_RUN_ID`` already set) nothing is registered.

Standard library only (urllib): no extra dependency for the CLI.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rft_core.errors import ServiceUnavailable
from rft_core.monitor.events import ENV_REDIS_PREFIX, ENV_REDIS_URL, ENV_RUN_ID, check_redis_prefix

ENV_DASHBOARD_URL = "RFT_DASHBOARD_URL"
ENV_API_TOKEN = "RFT_API_TOKEN"
TIMEOUT_S = 15
EXIT_INTERRUPTED = 130

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Registration:
    run_id: int  # the dashboard's run id (its page is <dashboard>/runs/<run_id>/)
    key: str  # RFT_RUN_ID: the run's event stream is rft:<prefix>:run:<key>
    page: str  # the run page's address
    base: str = ""  # the dashboard's address, for the report at the end
    token: str = field(default="", repr=False)


class DashboardRefused(ServiceUnavailable):
    """The dashboard answered with an error, or could not be reached."""


def _post(base: str, token: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    url = base.rstrip("/") + path
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Authorization": f"Bearer {token}",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:  # noqa: S310
            return json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as err:
        try:
            detail = json.loads(err.read() or b"{}").get("detail") or err.reason
        except (ValueError, AttributeError):
            detail = err.reason
        raise DashboardRefused(
            f"{ENV_DASHBOARD_URL}={base}: {path} answered {err.code}: {detail}"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        raise DashboardRefused(
            f"{ENV_DASHBOARD_URL}={base} is unreachable ({reason}); start the dashboard or "
            f"unset {ENV_DASHBOARD_URL} to run without it"
        ) from err


def dashboard_settings() -> tuple[str, str] | None:
    """(address, token) when this run should register itself, else None."""
    base = os.environ.get(ENV_DASHBOARD_URL, "").strip()
    if not base or os.environ.get(ENV_RUN_ID):
        return None  # no dashboard, or a run the dashboard launched (registered already)
    token = os.environ.get(ENV_API_TOKEN, "").strip()
    if not token:
        raise DashboardRefused(
            f"{ENV_DASHBOARD_URL} is set but {ENV_API_TOKEN} is not: create a token on the "
            f"dashboard's account page (/account/) and export {ENV_API_TOKEN}, or unset "
            f"{ENV_DASHBOARD_URL}"
        )
    return base, token


def register(config_yaml: str, job_dir: Path) -> Registration | None:
    """Register this run with the dashboard (see the module doc); None when not asked to."""
    found = dashboard_settings()
    if found is None:
        return None
    base, token = found
    body = {"config_yaml": config_yaml, "job_dir": str(Path(job_dir).absolute())}
    answer = _post(base, token, "/api/v1/runs/register/", body)
    try:
        registration = Registration(
            run_id=int(answer["run"]["id"]),
            key=str(answer["key"]),
            page=str(answer["page"]),
            base=base,
            token=token,
        )
        redis_url = str(answer["events_redis_url"])
        prefix = check_redis_prefix(answer["events_redis_prefix"], "events_redis_prefix")
    except (KeyError, TypeError, ValueError) as err:
        raise DashboardRefused(f"{ENV_DASHBOARD_URL}={base}: unexpected answer {answer!r}") from err
    os.environ[ENV_REDIS_URL] = redis_url
    os.environ[ENV_REDIS_PREFIX] = prefix
    os.environ[ENV_RUN_ID] = registration.key
    print(f"trinity run: live in the dashboard at {registration.page}", file=sys.stderr)
    return registration


def report_exit(registration: Registration, exit_code: int, message: str = "") -> None:
    """Tell the dashboard how the run ended; a failure to do so only warns."""
    body = {"exit_code": int(exit_code), "message": message[:2000]}
    try:
        _post(
            registration.base,
            registration.token,
            f"/api/v1/runs/{registration.run_id}/finish/",
            body,
        )
    except DashboardRefused as err:
        print(f"trinity run: warning: could not report the end to the dashboard: {err}",
              file=sys.stderr)  # fmt: skip


@contextmanager
def reporting(registered: list[Registration]) -> Iterator[None]:
    """Report how the body ended to the run ``registered`` holds once the body registered it
    (``register`` is called inside, when the job dir is final): 0, 130 on Ctrl-C, the error's
    exit code (1 when it has none) with its message."""
    try:
        yield
    except KeyboardInterrupt:
        for registration in registered:
            report_exit(registration, EXIT_INTERRUPTED, "interrupted (Ctrl-C)")
        raise
    except BaseException as err:
        code = getattr(err, "exit_code", 1)
        for registration in registered:
            report_exit(registration, code if isinstance(code, int) and code else 1, str(err))
        raise
    for registration in registered:
        report_exit(registration, 0)


__all__ = [
    "ENV_API_TOKEN",
    "ENV_DASHBOARD_URL",
    "DashboardRefused",
    "Registration",
    "register",
    "reporting",
    "report_exit",
]
