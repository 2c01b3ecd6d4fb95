"""What an actor prints, on the run's log download: a trainer's captured stdout, stderr and a
``transformers`` warning (``rft_core.actors.actor_log``) go through its real monitor, the Redis stream
and the ingestor into LogLine rows, and ``/runs/<id>/logs.txt`` lists them with the role and
level, filterable by both."""

from __future__ import annotations

import logging
import sys

import pytest
from api_helpers import ingest_stream, make_experiment, make_run, make_user, session_client

from rft_core.actors.actor_log import capture_output, log_to_file, release_output
from rft_core.monitor import (
    ENV_REDIS_URL,
    ENV_RUN_ID,
    MonitorLogHandler,
    build_monitor,
    stream_key,
)

LOGGER = "rft_core.output_logs_test"


@pytest.mark.django_db(transaction=True)
def test_a_trainers_prints_reach_logs_txt_with_role_and_level(
    unique_id, tmp_path, monkeypatch, redis_url, redis_client
):
    alice = make_user("alice")
    run = make_run(make_experiment(alice, "prints"), key=unique_id, job_dir=str(tmp_path))
    redis_client.test_keys.append(stream_key(run.key))
    monkeypatch.setenv(ENV_REDIS_URL, redis_url)
    monkeypatch.setenv(ENV_RUN_ID, run.key)
    monkeypatch.setenv("RFT_HEARTBEAT_S", "3600")
    logger = logging.getLogger(LOGGER)
    monitor = build_monitor("none", {}, tmp_path, role="trainer", run_name="p")
    handler = MonitorLogHandler(monitor)
    logger.addHandler(handler)  # as actor_setup.setup_actor_logging wires a role's logger
    log_to_file(tmp_path / "log" / "trainer.log", LOGGER)
    capture_output("trainer", LOGGER)
    try:
        print("loss went down")
        print("CUDA not found, using the CPU", file=sys.stderr)
        logging.getLogger("transformers.generation").warning("a generation flag is ignored")
    finally:
        release_output("trainer")
        for h in list(logger.handlers):
            logger.removeHandler(h)
            h.close()
        monitor.close()
    ingest_stream(redis_url, redis_client, run.key)

    client = session_client(alice)
    response = client.get(f"/runs/{run.pk}/logs.txt")
    assert response.status_code == 200
    lines = [
        line.split(" ", 1)[1] for line in b"".join(response.streaming_content).decode().splitlines()
    ]
    assert lines == [
        "INFO trainer loss went down",
        "WARNING trainer CUDA not found, using the CPU",
        "WARNING trainer transformers.generation: a generation flag is ignored",
    ]
    warnings = client.get(f"/runs/{run.pk}/logs.txt", {"level": "warning", "actor": "trainer"})
    text = b"".join(warnings.streaming_content).decode()
    assert "CUDA not found" in text and "loss went down" not in text
    assert client.get(f"/runs/{run.pk}/logs.txt", {"actor": "explorer"}).getvalue() == b""
