"""rft_core.monitor.dashboard: a terminal's trinity run registering with a dashboard, against a
real HTTP server on a free port (standing in for the dashboard's API, whose own side is tested
in tests/webapp/runs/test_external_runs.py and end to end in tests/e2e/test_outside_runs.py)."""

from __future__ import annotations

import json
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from rft_core.monitor import dashboard
from rft_core.monitor.events import ENV_REDIS_PREFIX, ENV_REDIS_URL, ENV_RUN_ID


class FakeDashboard(BaseHTTPRequestHandler):
    requests: list[tuple[str, dict, str]] = []
    refuse: tuple[int, str] | None = None

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, body, self.headers["Authorization"]))
        if type(self).refuse:
            code, detail = type(self).refuse
            answer, status = {"detail": detail}, code
        elif self.path == "/api/v1/runs/register/":
            answer, status = {"run": {"id": 7}, "key": "rkey7", "page": "http://d/runs/7/",
                              "events_redis_url": "redis://elsewhere:6379/3",
                              "events_redis_prefix": "team-a"}, 201  # fmt: skip
        else:
            answer, status = {"id": 7, "status": "succeeded"}, 200
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(autouse=True)
def stream_env_restored():
    """register() sets the stream's env in this process, as it must in the CLI; monkeypatch's
    delenv records nothing for an absent variable, so restore by hand or later tests in the
    session (the orchestration tests) would send their events to this test's fake Redis."""
    saved = {name: os.environ.get(name) for name in (ENV_RUN_ID, ENV_REDIS_URL, ENV_REDIS_PREFIX)}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def site(monkeypatch):
    FakeDashboard.requests, FakeDashboard.refuse = [], None
    server = HTTPServer(("127.0.0.1", 0), FakeDashboard)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    monkeypatch.setenv(dashboard.ENV_DASHBOARD_URL, url)
    monkeypatch.setenv(dashboard.ENV_API_TOKEN, "rft_secret")
    monkeypatch.delenv(ENV_RUN_ID, raising=False)
    monkeypatch.delenv(ENV_REDIS_URL, raising=False)
    yield url
    server.shutdown()


def test_register_sets_the_stream_env_and_the_exit_is_reported(site, tmp_path):
    registered = []
    with dashboard.reporting(registered):
        registration = dashboard.register("name: x\n", tmp_path / "job")
        registered.append(registration)
        assert (os.environ[ENV_RUN_ID], os.environ[ENV_REDIS_URL]) == (
            "rkey7", "redis://elsewhere:6379/3",
        )  # fmt: skip
        # the dashboard's deployment prefix: the run streams to rft:team-a:run:rkey7
        assert os.environ[ENV_REDIS_PREFIX] == "team-a"
    paths = [(path, body) for path, body, _ in FakeDashboard.requests]
    assert paths == [
        ("/api/v1/runs/register/", {"config_yaml": "name: x\n", "job_dir": str(tmp_path / "job")}),
        ("/api/v1/runs/7/finish/", {"exit_code": 0, "message": ""}),
    ]
    assert {auth for _, _, auth in FakeDashboard.requests} == {"Bearer rft_secret"}


def test_an_error_is_reported_with_its_exit_code_and_raised(site, tmp_path):
    from rft_core.errors import ConfigError

    registered = [dashboard.register("name: x\n", tmp_path)]
    with pytest.raises(ConfigError), dashboard.reporting(registered):
        raise ConfigError("buffer.batch_size", "must be positive")
    path, body, _ = FakeDashboard.requests[-1]
    assert path == "/api/v1/runs/7/finish/" and body["exit_code"] == 2
    assert "buffer.batch_size" in body["message"]


def test_a_refusal_names_the_dashboard_and_its_reason(site, tmp_path):
    FakeDashboard.refuse = (400, "job_dir: /x is outside the directories this dashboard may read")
    with pytest.raises(dashboard.DashboardRefused, match="answered 400: job_dir: /x is outside"):
        dashboard.register("name: x\n", tmp_path)


def test_an_unreachable_dashboard_says_how_to_run_without_it(monkeypatch, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    monkeypatch.setenv(dashboard.ENV_DASHBOARD_URL, f"http://127.0.0.1:{port}")
    monkeypatch.setenv(dashboard.ENV_API_TOKEN, "t")
    monkeypatch.delenv(ENV_RUN_ID, raising=False)
    with pytest.raises(dashboard.DashboardRefused, match="unreachable.*unset RFT_DASHBOARD_URL"):
        dashboard.register("name: x\n", tmp_path)


def test_no_token_is_a_clear_error_and_no_dashboard_or_a_dashboard_launch_registers_nothing(
    monkeypatch, tmp_path
):
    monkeypatch.setenv(dashboard.ENV_DASHBOARD_URL, "http://127.0.0.1:9")
    monkeypatch.delenv(dashboard.ENV_API_TOKEN, raising=False)
    monkeypatch.delenv(ENV_RUN_ID, raising=False)
    with pytest.raises(dashboard.DashboardRefused, match="RFT_API_TOKEN is not"):
        dashboard.register("name: x\n", tmp_path)
    monkeypatch.setenv(ENV_RUN_ID, "launched-by-the-dashboard")
    assert dashboard.register("name: x\n", tmp_path) is None
    monkeypatch.delenv(dashboard.ENV_DASHBOARD_URL)
    monkeypatch.delenv(ENV_RUN_ID)
    assert dashboard.register("name: x\n", tmp_path) is None
