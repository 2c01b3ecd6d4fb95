"""Launch, cancel and reconcile end to end: a real Celery worker submits the (shortened) demo
experiment to a real local Ray head through the job server; the real event ingestor projects
the run's Redis stream into the test database; Ray's job server and the machine's process table
say what happened to the job.

The demo is cut by config to what exercises every part: an SFT stage of 2 steps, an RFT stage of
2 steps with 4 tasks x 4 samples, no eval, a checkpoint at the last step of each stage.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import psutil
import pytest
import redis
import yaml
from demo_site import shorten_demo
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from rft_core.demo import build_demo
from rft_core.monitor import runs_set, stream_key
from webapp.audit.models import AuditEvent
from webapp.audit.record import Actor
from webapp.checkpoints.models import Checkpoint
from webapp.experiments.config_policy import canonical_yaml, parse_yaml
from webapp.experiments.models import Experiment
from webapp.runs import actions, ray_jobs
from webapp.runs.models import MetricPoint, Run, RunStatus

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


def short_demo_config() -> dict:
    return shorten_demo(parse_yaml((ROOT / "examples" / "demo" / "grpo_demo.yaml").read_text()))


@pytest.fixture(scope="session")
def demo_assets(tmp_path_factory):
    return build_demo(tmp_path_factory.mktemp("demo"))


@pytest.fixture
def launch_env(ray_head, demo_assets, tmp_path, monkeypatch, settings):
    """Web side and (through the environment) worker side agree on Ray, the demo and the roots."""
    runs = tmp_path / "runs"
    env = {
        "RAY_ADDRESS": ray_head.address,
        "RFT_DEMO_DIR": str(demo_assets.root),
        "RFT_RUNS_DIR": str(runs),
        "RFT_ALLOWED_PATH_ROOTS": os.pathsep.join([str(demo_assets.root), str(runs)]),
        "RFT_FOLLOW_INTERVAL_S": "1",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TRINITY_CHECKPOINT_ROOT_DIR", raising=False)
    settings.RAY_ADDRESS = ray_head.address
    settings.RFT_RUNS_DIR = runs
    settings.RFT_ALLOWED_PATH_ROOTS = [demo_assets.root, runs]
    return runs


@pytest.fixture
def runs_queue(launch_env, celery_worker_queue, settings):
    """A real worker (started after launch_env, so with its environment) serving the runs tasks."""
    settings.RFT_RUNS_QUEUE = celery_worker_queue
    return celery_worker_queue


@pytest.fixture
def ingestor(redis_url, unique_id):
    """The real event ingestor in a thread, on a consumer group of its own, for the run keys
    the test adds to the yielded set."""
    from workers.ingestor import Ingestor

    keys: set[str] = set()
    client = redis.Redis.from_url(redis_url)
    worker = Ingestor(client, f"test-{unique_id}", group=f"test-{unique_id}", only_runs=keys)
    stop = threading.Event()

    def loop() -> None:
        try:
            while not stop.is_set():
                worker.poll(block_ms=200)
        finally:
            connection.close()

    thread = threading.Thread(target=loop, name="ingestor", daemon=True)
    thread.start()
    yield keys
    stop.set()
    thread.join(timeout=30)
    client.delete(*[stream_key(k) for k in keys] or ["-"])
    client.srem(runs_set(), *keys or ["-"])
    client.close()


@pytest.fixture
def owner():
    return get_user_model().objects.create_user("alice", password="correct-horse-battery")


def make_experiment(owner, name: str = "demo", data: dict | None = None) -> Experiment:
    data = data or short_demo_config()
    return Experiment.objects.create(
        owner=owner, name=name, project="demo", config_yaml=canonical_yaml(data), config=data
    )


def running_run(experiment, number: int, **fields) -> Run:
    """A run row said to be running (its Ray job is whatever the test makes of it)."""
    return Run.objects.create(
        experiment=experiment,
        number=number,
        status=RunStatus.RUNNING,
        config_yaml=experiment.config_yaml,
        config=experiment.config,
        **fields,
    )


def launch(owner, experiment, keys: set[str]) -> Run:
    run = actions.launch_run(Actor(user=owner), experiment)
    keys.add(run.key)
    return run


def wait_for(what: str, predicate, timeout_s: float = 240.0, every_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            runs = "\n".join(describe(run) for run in Run.objects.order_by("pk"))
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{runs}")
        time.sleep(every_s)


def describe(run: Run) -> str:
    """A run's row, its Ray job and the tail of the job's log (for a failing test's message)."""
    text = f"run {run.pk} #{run.number}: {run.status} {run.exit_reason!r} {run.last_error!r}"
    text += f" heartbeat={run.last_heartbeat} sid={run.submission_id!r}"
    if run.submission_id:
        try:
            text += f"\n  job: {ray_jobs.status(run.submission_id)}"
            text += "\n  log: " + ray_jobs.logs(run.submission_id)[-1500:]
        except ray_jobs.RayJobsError as err:
            text += f"\n  job: {err}"
    return text


def wait_until_running(run: Run) -> None:
    """Until its first heartbeat came through the ingestor (fails at once if the run ended)."""
    wait_for(f"run #{run.number} to leave queued/starting", lambda: status_of(run) not in WAITING)
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING, describe(run)


WAITING = (RunStatus.QUEUED, RunStatus.STARTING)


def status_of(run: Run) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run.pk)


def driver_processes(run: Run) -> list[psutil.Process]:
    """The job's driver: the `trinity run` of this run's launch config."""
    config = str(Path(Run.objects.get(pk=run.pk).job_dir).parents[1] / "config.yaml")
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if config in cmd and "run" in cmd:
            found.append(proc)
    return found


def processes_of_run(run: Run) -> list[psutil.Process]:
    """Every process carrying the run's stream id (the driver and all its actors get it
    through the job's runtime_env)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("RFT_RUN_ID") == run.key:
                found.append(proc)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def alive_actors(ray_head, job_id: str) -> list[str]:
    from ray.util.state.api import StateApiClient
    from ray.util.state.common import ListApiOptions, StateResource

    from webapp.health.checks import ray_auth_headers

    client = StateApiClient(
        address=ray_head.address,
        headers={**ray_auth_headers(), "Content-Type": "application/json"},
    )
    actors = client.list(
        StateResource.ACTORS,
        options=ListApiOptions(filters=[("job_id", "=", job_id)]),
        raise_on_missing_output=False,
    )
    return [a["class_name"] for a in map(_as_dict, actors) if a["state"] != "DEAD"]


def _as_dict(actor) -> dict:
    return actor if isinstance(actor, dict) else actor.__dict__


# ---------------------------------------------------------------- the tests


@pytest.mark.timeout(600)
def test_the_demo_run_succeeds_with_metrics_and_checkpoints_and_a_cancelled_run_stops_its_job(
    runs_queue, ingestor, owner, launch_env, ray_head, demo_assets
):
    experiment = make_experiment(owner)
    first = launch(owner, experiment, ingestor)
    second = launch(owner, experiment, ingestor)
    assert (first.number, second.number) == (1, 2)

    # the second run: running (its first heartbeat came through the ingestor), then cancelled
    wait_until_running(second)
    second.refresh_from_db()
    job = ray_jobs.status(second.submission_id)
    assert job.status == "RUNNING" and job.job_id
    assert alive_actors(ray_head, job.job_id)  # the trainer (SFT stage) is up
    actions.cancel_run(Actor(user=owner), second)
    wait_for("run #2 cancelled", lambda: status_of(second) == RunStatus.CANCELLED, 120)
    second.refresh_from_db()
    assert second.exit_reason == "cancelled by alice"
    assert ray_jobs.status(second.submission_id).status == "STOPPED"
    assert alive_actors(ray_head, job.job_id) == []
    wait_for("run #2's processes gone", lambda: processes_of_run(second) == [], 60)

    # the first run: succeeded, with the rows the ingestor projected from its stream
    wait_for("run #1 succeeded", lambda: status_of(first) not in actions.ACTIVE_STATUSES, 420, 1)
    first.refresh_from_db()
    assert first.status == RunStatus.SUCCEEDED, (first.exit_reason, first.last_error)
    assert first.started_at and first.finished_at and first.started_at <= first.finished_at
    assert ray_jobs.status(first.submission_id).status == "SUCCEEDED"

    # each run has its own launch config and job dir: <root>/run-<pk>/<project>/<name>, the
    # root (relative in the demo config) in the runs area of the experiment's owner
    root = launch_env / "users" / str(owner.pk) / "checkpoints"
    assert first.job_dir == str(root / f"run-{first.pk}" / "demo" / "grpo_demo")
    assert second.job_dir == str(root / f"run-{second.pk}" / "demo" / "grpo_demo")
    launched = yaml.safe_load((root / f"run-{first.pk}" / "config.yaml").read_text())
    assert launched["checkpoint_root_dir"] == str(root / f"run-{first.pk}")
    assert launched["model"]["model_path"] == str(demo_assets.model_dir)  # resolved, absolute
    for stage in ("sft_warmup", "rft"):
        assert (Path(first.job_dir) / stage / "global_step_2" / "actor").is_dir()

    wait_for(
        "metric rows of both stages",
        lambda: (
            set(MetricPoint.objects.filter(run=first).values_list("stage", flat=True))
            >= {"sft_warmup", "rft"}
        ),
        60,
    )
    names = set(MetricPoint.objects.filter(run=first).values_list("name", flat=True))
    assert any(name.startswith("actor/") for name in names), sorted(names)[:20]
    steps = set(Checkpoint.objects.filter(run=first).values_list("stage", "step"))
    assert {("sft_warmup", 2), ("rft", 2)} <= steps
    statuses = [
        (e.target_id, e.after["status"])
        for e in AuditEvent.objects.filter(action="run.status").order_by("id")
    ]
    assert (str(second.pk), "cancelled") in statuses and (str(first.pk), "succeeded") in statuses


@pytest.mark.timeout(300)
def test_a_killed_job_driver_is_reconciled_as_failed_with_the_reason(runs_queue, ingestor, owner):
    run = launch(owner, make_experiment(owner), ingestor)
    wait_until_running(run)
    (driver,) = wait_for("its driver process", lambda: driver_processes(run))
    driver.send_signal(signal.SIGKILL)
    run.refresh_from_db()
    wait_for("Ray to see the job fail", lambda: ray_jobs.status(run.submission_id).terminal, 60)
    actions.reconcile_runs()  # what beat runs (the worker's follow task may be first: same code)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "killed by signal 9" in run.exit_reason, run.exit_reason
    assert run.finished_at is not None
    wait_for("the run's actors gone", lambda: processes_of_run(run) == [], 60)


@pytest.mark.timeout(300)
def test_the_live_runs_of_a_restarted_ray_head_become_lost(runs_queue, ingestor, owner, ray_head):
    run = launch(owner, make_experiment(owner), ingestor)
    wait_until_running(run)
    ray_head.restart()
    actions.reconcile_runs()  # (the worker's follow task may get there first: the same code)
    run.refresh_from_db()
    assert run.status == RunStatus.LOST
    assert "Ray does not know job" in run.exit_reason and "restarted" in run.exit_reason


def test_a_running_run_whose_heartbeat_is_older_than_the_setting_becomes_lost(
    launch_env, owner, settings
):
    settings.RFT_HEARTBEAT_TIMEOUT_S = 30
    experiment = make_experiment(owner)
    run, fresh = running_run(experiment, 1), running_run(experiment, 2)
    sids = []
    for r in (run, fresh):  # their Ray jobs are alive: only the heartbeat tells
        r.submission_id = f"rft-test-{uuid.uuid4().hex[:8]}"
        ray_jobs.submit("sleep 120", r.submission_id)
        r.save(update_fields=["submission_id"])
        sids.append(r.submission_id)
    try:
        wait_for(
            "the jobs running",
            lambda: all(ray_jobs.status(s).status == "RUNNING" for s in sids),
            60,
        )
        now = timezone.now()
        Run.objects.filter(pk=run.pk).update(last_heartbeat=now - timedelta(seconds=31))
        Run.objects.filter(pk=fresh.pk).update(last_heartbeat=now)
        assert [r.pk for r in actions.reconcile_runs()] == [run.pk]
        run.refresh_from_db()
        fresh.refresh_from_db()
        assert run.status == RunStatus.LOST and fresh.status == RunStatus.RUNNING
        assert run.exit_reason.startswith("no heartbeat for ")
        assert 31 <= int(run.exit_reason.split()[3]) < 60
        assert "RFT_HEARTBEAT_TIMEOUT_S=30" in run.exit_reason
        (row,) = AuditEvent.objects.filter(action="run.status")
        assert row.actor_name == "system" and row.after["status"] == "lost"
    finally:
        for sid in sids:
            ray_jobs.stop(sid)


def test_a_worker_that_starts_reconciles_the_runs_whose_job_died_meanwhile(
    launch_env, owner, unique_id, request
):
    run = running_run(
        make_experiment(owner),
        1,
        submission_id=f"rft-gone-{unique_id}",  # no such job on this Ray
        last_heartbeat=timezone.now(),
    )
    request.getfixturevalue("celery_worker_queue")  # the worker starts only now
    wait_for("the worker's reconcile", lambda: status_of(run) == RunStatus.LOST, 60)
    run.refresh_from_db()
    assert "Ray does not know job" in run.exit_reason
