"""Real ``python -m workers.ingestor`` processes on a real Redis stream of 5,000 entries: one
SIGKILLed in the middle and started again, and two sharing one consumer group; the database
ends with every event exactly once (counts, and the seq set 1..N dense)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from django.contrib.auth import get_user_model

from rft_core.monitor import runs_set, stream_key
from tests.conftest import database_url_of_test_db
from webapp.events.models import RunEvent
from webapp.experiments.models import Experiment
from webapp.runs.models import MetricPoint, Run, RunStatus

pytestmark = pytest.mark.django_db(transaction=True)

N = 5000


@pytest.fixture
def stream(unique_id, redis_client):
    """A Run and 5,000 metric entries in its stream (written before any ingestor runs)."""
    owner = get_user_model().objects.create_user("alice", password=None)
    experiment = Experiment.objects.create(owner=owner, name="e", config_yaml="", config={})
    run = Run.objects.create(
        experiment=experiment, number=1, key=unique_id, status=RunStatus.RUNNING, config_yaml=""
    )
    key = stream_key(run.key)
    redis_client.test_keys.append(key)
    pipe = redis_client.pipeline(transaction=False)
    for i in range(N):
        data = json.dumps({"rollout/reward/mean": i / N})
        fields = {"run": run.key, "kind": "metric", "role": "explorer", "stage": "rft",
                  "step": str(i + 1), "ts": repr(time.time()), "data": data}  # fmt: skip
        pipe.xadd(key, fields)
    pipe.execute()
    yield run
    redis_client.srem(runs_set(), run.key)


def _start(run: Run, consumer: str, redis_url: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url_of_test_db(),
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
    }
    cmd = [sys.executable, "-m", "workers.ingestor", "--consumer", consumer,
           "--group", f"g-{run.key}", "--only-runs", run.key, "--block-ms", "200"]  # fmt: skip
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_for(predicate, procs, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        for proc in procs:
            if proc.poll() is not None:
                raise AssertionError(f"ingestor exited {proc.returncode}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError("the ingestors did not store the stream in time")
        time.sleep(0.05)


def _stored(run: Run) -> int:
    return RunEvent.objects.filter(run_key=run.key).count()


def _stop(*procs: subprocess.Popen) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        proc.wait(timeout=30)


def _assert_each_event_once(run: Run, redis_client) -> None:
    seqs = list(RunEvent.objects.filter(run_key=run.key).values_list("seq", flat=True))
    assert sorted(seqs) == list(range(1, N + 1))
    ids = RunEvent.objects.filter(run_key=run.key).values_list("stream_id", flat=True)
    assert len(set(ids)) == N
    steps = MetricPoint.objects.filter(run=run).order_by("seq").values_list("step", flat=True)
    assert list(steps) == list(range(1, N + 1))  # stream order kept by seq, each once
    key = stream_key(run.key)
    assert redis_client.xpending(key, f"g-{run.key}")["pending"] == 0
    assert redis_client.xlen(key) == 0  # all stored and acked: trimmed


def test_an_ingestor_killed_mid_stream_and_restarted_stores_each_event_once(
    stream, redis_url, redis_client
):
    first = _start(stream, "ingestor-1", redis_url)
    try:
        _wait_for(lambda: _stored(stream) >= 600, [first])
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        _stop(first)
    assert 600 <= _stored(stream) < N  # killed in the middle
    again = _start(stream, "ingestor-1", redis_url)  # the same name takes its pending back
    try:
        _wait_for(lambda: _stored(stream) >= N, [again])
        _wait_for(lambda: redis_client.xlen(stream_key(stream.key)) == 0, [again])
    finally:
        _stop(again)
    _assert_each_event_once(stream, redis_client)


def test_two_ingestors_on_one_stream_store_each_event_once(stream, redis_url, redis_client):
    procs = [_start(stream, f"ingestor-{i}", redis_url) for i in (1, 2)]
    try:
        _wait_for(lambda: _stored(stream) >= N, procs)
        _wait_for(lambda: redis_client.xlen(stream_key(stream.key)) == 0, procs)
    finally:
        _stop(*procs)
    _assert_each_event_once(stream, redis_client)
