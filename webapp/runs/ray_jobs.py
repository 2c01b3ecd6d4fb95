"""Ray's job server, as the dashboard sees it: submit a run's job, read its status and log,
stop it. The only importer of ``ray.job_submission.JobSubmissionClient`` (imported lazily, so
the web process loads Ray only when it talks to it).

Nothing here calls ``ray.init()``: a Celery worker never joins the cluster, it only speaks
HTTP to the job server (Ray's dashboard port, 8265 by default). ``RAY_ADDRESS`` may be that
URL (``http://head:8265``, what ``make demo`` writes), or the forms ``ray``'s own tools take
(``ray://head:10001``, ``head:6379``): those name the head, whose job server is then assumed on
Ray's default dashboard port.

Token auth (on by default for heads ``ray start`` makes in Ray 2.60): Ray's client adds its
token only when *this* process runs with ``RAY_AUTH_MODE=token``, so we pass the header
ourselves from ``RAY_AUTH_TOKEN`` / ``RAY_AUTH_TOKEN_PATH`` / ``~/.ray/auth_token``
(``webapp.health.checks.ray_auth_headers``, the same token the health page sends).

Errors: :class:`RayUnreachable` (no answer, or the token was refused: nothing is known about the
job), :class:`JobNotFound` (the job server answers but does not know the submission id: a
restarted head forgot it), :class:`RayJobsError` for any other refusal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from webapp.health.checks import ray_auth_headers

DEFAULT_DASHBOARD_PORT = 8265
REQUEST_TIMEOUT_S = 15.0
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
# Log lines that say what went wrong, most telling first (see last_error_line).
_ERROR_MARKERS = ("error:", "Error", "Exception", "Traceback", "Killed", "FAILED", "failed")


class RayJobsError(Exception):
    """The job server refused a request (the message says what it answered)."""


class RayUnreachable(RayJobsError):
    """Nothing (or nothing that accepts our token) answers at the job server address."""


class JobNotFound(RayJobsError):
    """The job server answers but has no job of that submission id."""


@dataclass(frozen=True)
class JobState:
    status: str  # PENDING | RUNNING | STOPPED | SUCCEEDED | FAILED
    message: str = ""
    exit_code: int | None = None
    error_type: str | None = None
    job_id: str | None = None  # the driver's Ray job id (hex), once the driver connected
    start_time: float | None = None  # unix seconds
    end_time: float | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


def job_server_url(address: str | None = None) -> str:
    """The HTTP address of the job server for ``address`` (default ``settings.RAY_ADDRESS``)."""
    address = (address or settings.RAY_ADDRESS or "").strip()
    if address.startswith(("http://", "https://")):
        return address.rstrip("/")
    if address in ("", "auto", "local"):
        return f"http://127.0.0.1:{DEFAULT_DASHBOARD_PORT}"
    parts = urlsplit(address if "://" in address else f"gcs://{address}")
    host = parts.hostname or "127.0.0.1"
    return f"http://{host}:{DEFAULT_DASHBOARD_PORT}"


def unreachable_hint(url: str) -> str:
    return (
        f"Ray's job server at {url} does not answer — start a head with "
        "`ray start --head --num-cpus 2` (`make demo` starts one) or set RAY_ADDRESS "
        "to the job server of your cluster (http://<head>:8265)"
    )


def _client(address: str | None = None):
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    class _TimedClient(JobSubmissionClient):
        # Ray's client sends requests without a timeout; a hung server must not hang a worker.
        def _do_request(self, method, endpoint, **kwargs):
            kwargs.setdefault("timeout", REQUEST_TIMEOUT_S)
            return super()._do_request(method, endpoint, **kwargs)

    url = job_server_url(address)
    try:
        return _TimedClient(url, headers=ray_auth_headers())
    except AuthenticationError as err:
        raise RayUnreachable(
            f"Ray's job server at {url} refused our token; set RAY_AUTH_TOKEN (or "
            "RAY_AUTH_TOKEN_PATH) to the cluster's token"
        ) from err
    except (ConnectionError, OSError, RuntimeError) as err:
        raise RayUnreachable(f"{unreachable_hint(url)} ({_first_line(err)})") from err


def _call(fn, submission_id: str, *args):
    """Run one client call, turning Ray's RuntimeError("... status code 404 ...") into ours."""
    import requests
    from ray.exceptions import AuthenticationError

    try:
        return fn(submission_id, *args)
    except AuthenticationError as err:
        raise RayUnreachable(f"Ray's job server refused our token: {_first_line(err)}") from err
    except (requests.ConnectionError, requests.Timeout, ConnectionError) as err:
        raise RayUnreachable(f"Ray's job server stopped answering: {_first_line(err)}") from err
    except RuntimeError as err:
        if "status code 404" in str(err) or "does not exist" in str(err):
            raise JobNotFound(f"Ray knows no job {submission_id!r}") from err
        raise RayJobsError(_first_line(err)) from err


def submit(
    entrypoint: str,
    submission_id: str,
    runtime_env: dict | None = None,
    metadata: dict[str, str] | None = None,
    *,
    address: str | None = None,
) -> str:
    """Submit ``entrypoint`` as a Ray job; returns the submission id."""
    client = _client(address)

    def go(sid: str) -> str:
        return client.submit_job(
            entrypoint=entrypoint,
            submission_id=sid,
            runtime_env=runtime_env or None,
            metadata={k: str(v) for k, v in (metadata or {}).items()},
        )

    return _call(go, submission_id)


def status(submission_id: str, *, address: str | None = None) -> JobState:
    info = _call(_client(address).get_job_info, submission_id)
    return JobState(
        status=str(getattr(info.status, "value", info.status)),
        message=info.message or "",
        exit_code=info.driver_exit_code,
        error_type=info.error_type,
        job_id=info.job_id,
        start_time=info.start_time / 1000 if info.start_time else None,
        end_time=info.end_time / 1000 if info.end_time else None,
    )


def stop(submission_id: str, *, timeout_s: float = 60.0, address: str | None = None) -> JobState:
    """Ask Ray to stop the job (SIGTERM, then SIGKILL after Ray's grace period) and wait until
    the job server reports it terminal. Raises RayJobsError when it is still running after
    ``timeout_s``."""
    client = _client(address)
    _call(client.stop_job, submission_id)
    deadline = time.monotonic() + timeout_s
    while True:
        state = status(submission_id, address=address)
        if state.terminal:
            return state
        if time.monotonic() > deadline:
            raise RayJobsError(
                f"Ray job {submission_id} is still {state.status} {timeout_s:.0f} s after stop"
            )
        time.sleep(0.5)


def logs(submission_id: str, *, address: str | None = None) -> str:
    return _call(_client(address).get_job_logs, submission_id)


def last_error_line(log_text: str) -> str:
    """The line of a job's log that best says why it failed: the last one carrying an error
    marker (``trinity run: error: ...``, ``ValueError: ...``), else the last non-empty line."""
    lines = [line.strip() for line in log_text.splitlines() if line.strip()]
    for marker in _ERROR_MARKERS:
        for line in reversed(lines):
            if marker in line and not line.startswith("Traceback (most recent call last)"):
                return line[:2000]
    return lines[-1][:2000] if lines else ""


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
