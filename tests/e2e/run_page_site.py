"""The live run page's site for the browser tests of ``test_run_page.py`` and
``test_run_page_system_and_retention.py``: daphne and an event ingestor of one watched run on this
session's test database and the test Redis (``live_site``), carol and her running run whose events
rft_core's own ``Monitor`` writes into the run's Redis stream (``watched_run``), and what the tests
do on its page (sign in, keep to the site's host, read a chart's traces, stop the job). A test
module takes the fixtures with ``live_site, user, watched_run = run_page_site.fixtures()``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from rft_core.monitor import redis_prefix, runs_set, stream_key
from rft_core.monitor.monitor import Monitor
from rft_core.monitor.sinks import RedisStreamSink
from tests.conftest import database_url_of_test_db
from tests.e2e.conftest import daphne_command
from webapp.experiments.models import Experiment
from webapp.runs.models import Run, RunStatus
from workers.services import free_port

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "run-page-secret-1"


@dataclass
class Site:
    url: str
    var: Path
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def log(self, name: str) -> str:
        path = self.var / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def check_alive(self) -> None:
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited ({proc.returncode}):\n{self.log(name)}")


def _start(var: Path, name: str, cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    with open(var / f"{name}.log", "wb") as log:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def _wait_http(url: str, site: Site, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        site.check_alive()
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"daphne did not answer at {url} within {timeout} s:\n{site.log('web')}")


@pytest.fixture
def live_site(tmp_path, redis_url, redis_client, unique_id, celery_worker_queue, watched_run):
    """daphne and an ingestor of the watched run's stream only (other sessions' streams come
    and go on the shared Redis), on the test database; conversions go to the test's worker."""
    var = tmp_path / "var"
    var.mkdir()
    env = {
        **os.environ,
        "RFT_VAR_DIR": str(var),
        "DATABASE_URL": database_url_of_test_db(),
        "REDIS_URL": redis_url,
        "RFT_CONVERT_QUEUE": celery_worker_queue,
        "RFT_INGESTOR_GROUP": f"ingestor-{unique_id}",
        # the Cancel button's runs.cancel task: a queue no worker reads (dropped after), never
        # the shared default one another session's worker would act on
        "RFT_RUNS_QUEUE": f"q-unread-{unique_id}",
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
    }
    redis_client.test_keys.append(f"{settings.RFT_REDIS_NAMESPACE}q-unread-{unique_id}")
    port = free_port()
    site = Site(url=f"http://127.0.0.1:{port}", var=var)
    try:
        site.processes["ingestor"] = _start(
            var,
            "ingestor",
            [
                sys.executable,
                "-m",
                "workers.ingestor",
                "--consumer",
                unique_id,
                "--only-runs",
                watched_run.run.key,
            ],
            env,
        )
        site.processes["web"] = _start(var, "web", daphne_command(port), env)
        _wait_http(f"{site.url}/health.json", site)
        yield site
    finally:
        for proc in site.processes.values():
            proc.terminate()
        for proc in site.processes.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


# ------------------------------------------------------------------ the run and its writers


@dataclass
class RunUnderTest:
    run: Run
    job: Path
    redis_url: str
    monitors: dict[tuple[str, str], Monitor] = field(default_factory=dict)

    def monitor(self, role: str, stage: str) -> Monitor:
        """The run's monitor of ``role`` in ``stage``: rft_core's Monitor over its Redis sink."""
        key = (role, stage)
        if key not in self.monitors:
            sink = RedisStreamSink(self.redis_url, self.run.key, redis_prefix())
            self.monitors[key] = Monitor([sink], role=role, run_id=self.run.key, stage=stage)
        return self.monitors[key]

    def close(self) -> None:
        for monitor in self.monitors.values():
            monitor.close()


@pytest.fixture
def user():
    return get_user_model().objects.create_user("carol", password=PASSWORD)


@pytest.fixture
def watched_run(user, tmp_path, redis_url, redis_client, unique_id):
    experiment = Experiment.objects.create(owner=user, name="gsm8k-grpo", config_yaml="", config={})
    job = tmp_path / "job"
    job.mkdir()
    run = Run.objects.create(
        experiment=experiment,
        number=1,
        key=f"r{unique_id}",
        status=RunStatus.RUNNING,
        config_yaml="mode: both\n",
        job_dir=str(job),
        started_at=timezone.now(),
        stage="sft_warmup",
        total_steps=8,
    )
    redis_client.test_keys.append(stream_key(run.key))
    under_test = RunUnderTest(run=run, job=job, redis_url=redis_url)
    yield under_test
    under_test.close()
    redis_client.srem(runs_set(), run.key)


def guard_hosts(page, site_url: str) -> list[str]:
    """Abort every request to a host other than the site's; returns the list of those tried."""
    allowed = urlparse(site_url).netloc
    foreign: list[str] = []

    def handle(route) -> None:
        if urlparse(route.request.url).netloc == allowed:
            route.continue_()
        else:
            foreign.append(route.request.url)
            route.abort()

    page.route("**/*", handle)
    return foreign


def sign_in(page, site_url: str, username: str) -> None:
    page.goto(f"{site_url}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{site_url}/experiments/")


def trace(page, metric: str, kind: str, attr: str):
    """The ``attr`` array (x, y) of the raw or smoothed trace of a metric's chart, looked at as a
    user does: scrolled into view (live points reach only the charts on screen; call
    :func:`wait_points` first for a chart that was off screen)."""
    return page.evaluate(
        """([metric, kind, attr]) => {
            const div = document.querySelector(`.chart[data-metric="${metric}"]`);
            if (div) div.scrollIntoView({ block: "nearest" });
            if (!div || !div.data) return null;
            const t = div.data.find((t) => t.meta && t.meta.kind === kind);
            return t ? Array.from(t[attr]) : null;
        }""",
        [metric, kind, attr],
    )


def wait_points(page, metric: str, n: int) -> None:
    """Until the metric's chart, scrolled into view, draws ``n`` points in both its traces."""
    page.wait_for_function(
        """([metric, n]) => {
            const div = document.querySelector(`.chart[data-metric="${metric}"]`);
            if (div) div.scrollIntoView({ block: "nearest" });
            return !!(div && div.data && div.data[0].x.length >= n && div.data[1].x.length >= n);
        }""",
        arg=[metric, n],
    )


def stopped_job(run: Run) -> None:
    """The run's row as the cancel task leaves it, pushed to its page by ``publish_run`` (from a
    thread: Playwright's loop runs on this one)."""
    import threading

    from webapp.runs.live import publish_run

    def stop() -> None:
        Run.objects.filter(pk=run.pk).update(
            status=RunStatus.CANCELLED, finished_at=timezone.now(), exit_reason="cancelled by carol"
        )
        publish_run(run)

    worker = threading.Thread(target=stop)
    worker.start()
    worker.join()


REWARDS = [0.1, 0.5, 0.2, 0.6, 0.3, 0.7]


def write_sft(rut: RunUnderTest) -> None:
    sft = rut.monitor("trainer", "sft_warmup")
    for step in range(1, 6):
        sft.log({"actor/sft_loss": 2.0 / step}, step=step)
    sft.log_line("sft warmup done", "INFO")


def write_rft(rut: RunUnderTest, steps: range) -> None:
    trainer = rut.monitor("trainer", "rft")
    explorer = rut.monitor("explorer", "rft")
    for step in steps:
        explorer.log({"rollout/reward/mean": REWARDS[step - 1]}, step=step)
        trainer.log({"actor/pg_loss": 1.0 / step, "actor/ppo_kl": 0.01 * step}, step=step)
        explorer.log_line(f"explorer step {step} rollouts done", "INFO")
        trainer.log_line(f"trainer step {step} grad norm high", "WARNING")


def fixtures():
    """The ``live_site``, ``user`` and ``watched_run`` fixtures, for a test module's namespace."""
    return live_site, user, watched_run
