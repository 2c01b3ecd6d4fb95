"""`make demo`'s stack script: one clear line for each problem a user meets before anything
starts, and the embedded redis-server it runs when no Redis answers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workers.services import free_port, redis_answers

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.no_test_database  # a SQLite file of its own: no PostgreSQL pass


def _stack(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/stack.py", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def var_dir(tmp_path) -> dict[str, str]:
    return {"RFT_VAR_DIR": str(tmp_path), "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}


def test_a_taken_web_port_is_one_line(var_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _stack("prepare", env={**var_dir, "RFT_WEB_PORT": str(port)})
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"make: port {port} is already taken (another web server?); stop it or run "
        f"`make demo RFT_WEB_PORT={port + 1}`"
    ]


def test_an_unreachable_redis_url_is_one_line_naming_it(var_dir):
    url = f"redis://127.0.0.1:{free_port()}/0"
    result = _stack("prepare", env={**var_dir, "RFT_WEB_PORT": str(free_port()), "REDIS_URL": url})
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"Redis at REDIS_URL={url} does not answer" in lines[0]


def test_an_unreachable_ray_address_is_one_line_naming_it(var_dir, redis_url):
    address = f"http://127.0.0.1:{free_port()}"
    env = {
        **var_dir,
        "RFT_WEB_PORT": str(free_port()),
        "REDIS_URL": redis_url,
        "RAY_ADDRESS": address,
    }
    result = _stack("prepare", env=env)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"make: Ray: no answer at {address}")


def test_an_unreachable_database_is_one_line_not_a_traceback(var_dir):
    url = f"postgres://postgres@127.0.0.1:{free_port()}/nowhere"
    result = _stack("check-db", env={**var_dir, "DATABASE_URL": url})
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "database nowhere (postgresql) is unreachable" in lines[0]
    assert "Traceback" not in result.stderr


def test_prepare_writes_the_addresses_every_process_reads(var_dir, redis_url, tmp_path):
    web = free_port()
    result = _stack("prepare", env={**var_dir, "RFT_WEB_PORT": str(web), "REDIS_URL": redis_url})
    assert result.returncode == 0, result.stderr
    env = dict(line.split("=", 1) for line in (tmp_path / "run.env").read_text().splitlines())
    assert env["REDIS_URL"] == redis_url
    assert env["RFT_EMBEDDED_REDIS_PORT"] == ""  # an answering Redis is used, none is started
    assert env["RFT_WEB_PORT"] == str(web)
    assert env["RFT_RAY_HEAD"] == "1"
    assert env["RAY_ADDRESS"] == f"http://127.0.0.1:{env['RFT_RAY_DASHBOARD_PORT']}"


def test_the_embedded_redis_serves_and_stops_on_sigterm(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "scripts/stack.py", "redis"],
        cwd=ROOT,
        env={**os.environ, "RFT_VAR_DIR": str(tmp_path), "RFT_EMBEDDED_REDIS_PORT": str(port)},
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        for _ in range(100):
            if redis_answers(url, timeout=0.2):
                break
            assert proc.poll() is None, "redis-server exited"
            time.sleep(0.1)
        assert redis_answers(url)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    assert redis_answers(url, timeout=0.2) is False
