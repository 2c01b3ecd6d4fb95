"""`make demo`'s Ray process (scripts/stack.py ray): a real head whose job server the health
check sees up, whose actors start niced below the web, and that leaves no Ray process behind
when it gets SIGTERM (Ctrl-C under supervisord)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from webapp.health.checks import check_ray
from workers.services import first_free_port, free_port

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.no_test_database  # a SQLite file of its own: no PostgreSQL pass


def test_the_demo_ray_head_is_seen_up_niced_and_stops_without_leftovers(tmp_path):
    dashboard = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if k != "RAY_worker_niceness"},
        # a var dir of its own: the head's temp dir (and the leftovers it stops) follow from it
        "RFT_VAR_DIR": str(tmp_path),
        "RFT_RAY_HEAD": "1",
        "RFT_RAY_NUM_CPUS": "1",
        "RFT_RAY_DASHBOARD_PORT": str(dashboard),
        "RFT_RAY_GCS_PORT": str(first_free_port(6490)),
        "RFT_RAY_CLIENT_PORT": str(first_free_port(20101)),
        "RFT_RAY_AGENT_PORT": str(first_free_port(52465)),
    }
    head = subprocess.Popen([sys.executable, "scripts/stack.py", "ray"], cwd=ROOT, env=env)
    address = f"http://127.0.0.1:{dashboard}"
    try:
        deadline = time.monotonic() + 90
        status = check_ray(address)
        while not status.up and time.monotonic() < deadline and head.poll() is None:
            time.sleep(1)
            status = check_ray(address)
        assert status.up, status.detail
        assert status.detail.startswith("ray 2.")
        children = psutil.Process(head.pid).children(recursive=True)
        assert len(children) >= 3  # ray start, gcs_server, raylet, ...
        # the raylet starts the actors ACTOR_NICENESS above the web's niceness (the stack's
        # default): the live page keeps its latency beside the training (benchmarks/README.md)
        assert _raylet_env(head.pid, deadline).get("RAY_worker_niceness") == "10"
    finally:
        head.send_signal(signal.SIGTERM)
        code = head.wait(timeout=60)
    alive = [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    assert code in (0, -signal.SIGTERM, 128 + signal.SIGTERM, 1)
    assert check_ray(address).up is False


def _raylet_env(head_pid: int, deadline: float) -> dict[str, str]:
    """The environment of the head's raylet (it may start after the job server answers, and
    /proc shows its environment once it has been exec'd)."""
    while True:
        for child in psutil.Process(head_pid).children(recursive=True):
            try:
                if child.name() == "raylet" and (env := child.environ()).get("PATH"):
                    return env
            except psutil.Error:
                continue
        assert time.monotonic() < deadline, "the head started no raylet"
        time.sleep(0.5)
