"""`make demo`'s stack under supervisord, really started (``scripts/stack.py supervise`` on the
Procfile, in a var dir of the test's with its own ports, database, Redis database index and Ray
head): every process of it dies once while a run trains, and the run does not notice.

Each of the three runs on a stack of its own (``supervised`` is per test), so any one of them
can run alone or in any order:

1. During a run of the demo (shortened through the API: 2 SFT steps, then 2 GRPO steps of
   4 tasks x 4 samples), the ingestor, the web, the Celery worker and beat are each killed
   with SIGKILL. Each is started again, with one line in var/log/restarts.log, and
   /health.json (as staff) shows its restart. The run succeeds, and its metric points through
   the API are exactly the metric values of its monitor JSONL files, point by point (role,
   name, step, time): nothing lost and nothing stored twice across the ingestor's restart (whether the killed ingestor held entries read
   but not acked at that moment is up to timing; tests/workers' ingestor tests pin that case).
2. The Ray head's gcs_server is killed during a run: supervisord starts the head again
   on the same ports, the run becomes lost with the reason, and a second run is submitted to the
   new head (its job server knows the job).
3. SIGINT to supervisord (Ctrl-C under `make demo`) stops every process of the stack: none
   of the pids seen under it, Ray's included, is left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
import requests
from demo_site import log_in_session, shorten_demo
from redis_claim import CLAIM_KEY, claim_db

from webapp.health.checks import ray_auth_headers
from webapp.health.supervisor import read_counts
from webapp.health.supervisor import supervisor_rpc as _rpc
from workers.services import free_ports
from workers.supervision import (
    RestartCounter,
    SupervisionError,
    pace_delay,
    render_config,
    socket_path,
    write_config,
)

pytestmark = pytest.mark.no_test_database  # a SQLite file of its own: no PostgreSQL pass

ROOT = Path(__file__).resolve().parents[2]
# guards against a hung stack or run, not timing assertions
START_GUARD_S = 240
RUN_GUARD_S = 400
STOP_GUARD_S = 60
KILLED = ("ingestor", "web", "worker", "beat")


@dataclass
class SupervisedStack:
    var: Path
    env: dict[str, str]
    url: str
    supervisord: subprocess.Popen
    username: str = ""
    password: str = ""
    staff: requests.Session = field(default_factory=requests.Session)
    api: requests.Session = field(default_factory=requests.Session)

    @property
    def rpc(self):
        return _rpc(f"unix://{socket_path(self.var)}").supervisor

    def log(self, name: str) -> str:
        path = self.var / "log" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logs_tail(self, chars: int = 2500) -> str:
        names = ["supervisord", "restarts", "ray", "worker", "ingestor", "web", "beat"]
        return "\n".join(f"--- {name}\n{self.log(name)[-chars:]}" for name in names)

    def get(self, session: requests.Session, path: str, **kwargs):
        """GET that waits out a restarting web server (connection refused) for a while."""
        deadline = time.monotonic() + 60
        while True:
            try:
                return session.get(f"{self.url}{path}", timeout=30, **kwargs)
            except requests.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def health(self) -> dict:
        return self.get(self.staff, "/health.json").json()

    def run(self, pk: int) -> dict:
        return self.get(self.api, f"/api/v1/runs/{pk}/").json()

    def wait_run(self, pk: int, wanted: set[str], guard_s: float = RUN_GUARD_S) -> dict:
        deadline = time.monotonic() + guard_s
        while True:
            run = self.run(pk)
            if run["status"] in wanted:
                return run
            if run["is_final"] or time.monotonic() > deadline:
                raise AssertionError(
                    f"run {pk} is {run['status']} (wanted {sorted(wanted)}): "
                    f"{run.get('exit_reason')} {run.get('last_error')}\n{self.logs_tail()}"
                )
            time.sleep(1)

    def launch(self, experiment: int) -> int:
        response = self.api.post(f"{self.url}/api/v1/experiments/{experiment}/launch/", timeout=60)
        assert response.status_code == 201, response.text
        return response.json()["id"]


# ------------------------------------------------------------------ the config, the counter


def test_the_config_runs_each_procfile_line_with_the_run_env(tmp_path):
    procfile = tmp_path / "Procfile"
    procfile.write_text(
        "# comment\nweb: exec daphne -p $RFT_WEB_PORT app\nworker: celery -n w@%h\n"
    )
    env = tmp_path / "run.env"
    env.write_text("RFT_WEB_PORT=8123\nREDIS_URL=redis://127.0.0.1:6379/0\n")
    conf = render_config(procfile, env, tmp_path)
    import configparser

    parser = configparser.RawConfigParser()
    parser.read_string(conf)
    assert [s for s in parser.sections() if s.startswith("program:")] == [
        "program:web",
        "program:worker",
    ]
    web = parser["program:web"]
    assert web["command"].endswith("pace web && exec daphne -p $RFT_WEB_PORT app'")
    assert web["autorestart"] == "true" and web["stopasgroup"] == "true"
    assert web["stdout_logfile"] == str(tmp_path / "log" / "web.log")
    assert "w@%%h" in parser["program:worker"]["command"]  # supervisord's % escaped
    assert 'RFT_WEB_PORT="8123"' in parser["supervisord"]["environment"]
    assert parser["unix_http_server"]["file"] == str(tmp_path / "supervisor" / "supervisor.sock")
    assert parser["eventlistener:restarts"]["events"] == "PROCESS_STATE"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("web exec daphne\n", "Procfile:1: not a `name: command` line: 'web exec daphne'"),
        ("web: a\nweb: b\n", "Procfile:2: process 'web' is listed twice"),
        ("# nothing\n", "Procfile lists no process"),
    ],
)
def test_a_bad_procfile_is_one_message_naming_the_line(tmp_path, text, message):
    procfile = tmp_path / "Procfile"
    procfile.write_text(text)
    with pytest.raises(SupervisionError) as refused:
        render_config(procfile, tmp_path / "run.env", tmp_path)
    assert str(refused.value) == f"{procfile}{message[len('Procfile') :]}"


def test_a_var_dir_too_long_for_a_unix_socket_is_refused(tmp_path):
    procfile = tmp_path / "Procfile"
    procfile.write_text("web: true\n")
    var = tmp_path / ("v" * 120)
    with pytest.raises(SupervisionError, match="longer than 107 bytes.*shorter RFT_VAR_DIR"):
        render_config(procfile, tmp_path / "run.env", var)


def test_restarts_are_counted_from_exits_and_logged_one_line_each(tmp_path):
    import io

    log = io.StringIO()
    path = tmp_path / "supervisor" / "restarts.json"
    counter = RestartCounter(path, supervisord_pid=4242, log=log)
    events = [
        ("PROCESS_STATE_STARTING", {"processname": "web", "from_state": "STOPPED", "tries": "0"}),
        ("PROCESS_STATE_RUNNING", {"processname": "web", "from_state": "STARTING"}),
        ("PROCESS_STATE_EXITED", {"processname": "web", "from_state": "RUNNING", "expected": "0"}),
        ("PROCESS_STATE_STARTING", {"processname": "web", "from_state": "EXITED", "tries": "0"}),
        ("PROCESS_STATE_BACKOFF", {"processname": "web", "from_state": "STARTING"}),
        ("PROCESS_STATE_STARTING", {"processname": "web", "from_state": "BACKOFF", "tries": "1"}),
    ]
    for name, payload in events:
        counter.event(name, {**payload, "groupname": "web"}, now=1000.0)
    assert json.loads(path.read_text())["supervisord_pid"] == 4242
    web = read_counts(tmp_path)["web"]
    assert web.restarts == 2 and web.exits == [1000.0, 1000.0]
    assert web.last_exit.startswith("BACKOFF at ")
    lines = log.getvalue().splitlines()
    assert len(lines) == 2
    assert "restart 1 of web: EXITED (unexpected)" in lines[0]
    assert "restart 2 of web: BACKOFF" in lines[1] and "(try 2)" in lines[1]
    # the listener restarted under the same supervisord keeps the counts; a new one starts at 0
    assert RestartCounter(path, 4242, log=log).processes["web"].restarts == 2
    assert RestartCounter(path, 5151, log=log).processes == {}


def test_a_crash_loop_waits_longer_and_longer_up_to_a_minute():
    now = 10_000.0
    assert pace_delay([], now) == 0
    assert pace_delay([now - 5, now - 3], now) == 0
    assert pace_delay([now - 500] * 10, now) == 0  # old exits do not count
    delays = [pace_delay([now - 1] * n, now) for n in range(3, 10)]
    assert delays == [2, 4, 8, 16, 32, 60, 60]


def test_a_crash_loop_is_started_again_and_again_with_growing_waits(tmp_path):
    """A real supervisord on a Procfile whose one process exits at once: restarted each time,
    one line each in restarts.log, waits that grow, and never given up (FATAL)."""
    var = Path(tempfile.mkdtemp(prefix="rsup-", dir="/tmp"))
    try:
        _a_crash_loop(tmp_path, var)
    finally:
        shutil.rmtree(var, ignore_errors=True)


def _a_crash_loop(tmp_path: Path, var: Path) -> None:
    procfile = tmp_path / "Procfile"
    procfile.write_text("crash: echo started; exit 3\n")
    (var / "run.env").write_text("")
    conf = write_config(procfile, var / "run.env", var)
    supervisord = subprocess.Popen(
        [str(Path(sys.executable).parent / "supervisord"), "-n", "-c", str(conf)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    restarts = var / "log" / "restarts.log"
    try:
        deadline = time.monotonic() + 120
        while not (restarts.exists() and restarts.read_text().count(" of crash:") >= 5):
            assert supervisord.poll() is None and time.monotonic() < deadline, (
                restarts.read_text() if restarts.exists() else "no restarts.log"
            )
            time.sleep(0.5)
        state = _rpc(f"unix://{socket_path(var)}").supervisor.getProcessInfo("crash")
        assert state["statename"] != "FATAL"
    finally:
        supervisord.send_signal(signal.SIGTERM)
        supervisord.wait(timeout=STOP_GUARD_S)
    lines = restarts.read_text().splitlines()
    assert [line.split(" of crash:")[0].split()[-1] for line in lines[:5]] == list("12345")
    output = (var / "log" / "crash.log").read_text()
    assert "waiting 2 s before starting it again" in output
    assert "waiting 4 s before starting it again" in output


# ------------------------------------------------------------------ the real stack


def _manage(env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _wait_for(what: str, probe, stack: SupervisedStack, guard_s: float = START_GUARD_S):
    deadline = time.monotonic() + guard_s
    while True:
        value = probe()
        if value:
            return value
        if stack.supervisord.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen:\n{stack.logs_tail()}")
        time.sleep(1)


def _shortened_demo(stack: SupervisedStack) -> int:
    listed = stack.api.get(f"{stack.url}/api/v1/experiments/?search=grpo_demo", timeout=30)
    (demo,) = [e for e in listed.json()["results"] if e["name"] == "grpo_demo"]
    url = f"{stack.url}/api/v1/experiments/{demo['id']}/"
    config = stack.api.get(url, timeout=30).json()["config"]
    shorten_demo(config)
    patched = stack.api.patch(url, json={"config": config, "note": "shortened"}, timeout=60)
    assert patched.status_code == 200, patched.text
    return demo["id"]


@pytest.fixture
def supervised(redis_url) -> Iterator[SupervisedStack]:
    """A stack of the test's own: a test that kills its processes or stops it leaves no trace
    in another test's."""
    with _supervised_stack(redis_url) as stack:
        yield stack


@contextmanager
def _supervised_stack(redis_url: str) -> Iterator[SupervisedStack]:
    import uuid

    owner = f"t{uuid.uuid4().hex[:12]}"
    # short: supervisord's and Ray's Unix sockets live under it (a 107-byte limit)
    var = Path(tempfile.mkdtemp(prefix="rsup-", dir="/tmp"))
    (var / "log").mkdir()
    stack_redis = claim_db(redis_url, owner)
    web, dashboard, gcs, client, agent = free_ports(5)  # five distinct ports
    run_env = {
        "RFT_WEB_PORT": str(web),
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        # a database index of its own: no other stack's workers or run streams
        "REDIS_URL": stack_redis,
        "RFT_EMBEDDED_REDIS_PORT": "",
        "RAY_ADDRESS": f"http://127.0.0.1:{dashboard}",
        "RFT_RAY_HEAD": "1",
        "RFT_RAY_DASHBOARD_PORT": str(dashboard),
        "RFT_RAY_GCS_PORT": str(gcs),
        "RFT_RAY_CLIENT_PORT": str(client),
        "RFT_RAY_AGENT_PORT": str(agent),
        "DATABASE_URL": f"sqlite:///{var / 'db.sqlite3'}",
        "RFT_DEMO_DIR": str(var / "demo"),
        "RFT_RUNS_DIR": str(var / "runs"),
        "RFT_INGESTOR_GROUP": f"ingestor-{owner}",
        # a lost run is noticed within seconds, not the demo's 30 s
        "RFT_RECONCILE_INTERVAL_S": "3",
    }
    (var / "run.env").write_text("".join(f"{k}={v}\n" for k, v in run_env.items()))
    env = {**os.environ, **run_env, "RFT_VAR_DIR": str(var)}
    for name in ("RFT_ALLOWED_PATH_ROOTS", "SUPERVISOR_SERVER_URL", "RFT_RUNS_QUEUE"):
        env.pop(name, None)
    _manage(env, "migrate", "--noinput", "-v", "0")
    _manage(env, "ensure_demo_user", "--username", "ops", "--login-file", str(var / "login.txt"))
    fields = dict(line.split(": ", 1) for line in (var / "login.txt").read_text().splitlines())
    token = _manage(
        env,
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model\n"
        "from webapp.accounts.models import ApiToken\n"
        "print(ApiToken.issue(get_user_model().objects.get(username='ops'), 't')[1])",
    ).splitlines()[-1]  # after the shell's "N objects imported" banner
    out = open(var / "supervise.out", "wb")  # noqa: SIM115 - closed after supervisord stops
    supervisord = subprocess.Popen(
        [sys.executable, "scripts/stack.py", "supervise"],
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # a Ctrl-C of pytest is not a Ctrl-C of this stack
    )
    stack = SupervisedStack(
        var, env, f"http://127.0.0.1:{web}", supervisord, fields["username"], fields["password"]
    )
    stack.api.headers["Authorization"] = f"Bearer {token}"
    try:
        # while the stack starts (the Ray head takes longest): the demo model and data, and
        # the demo experiment that needs them
        subprocess.run(
            [str(Path(sys.executable).parent / "trinity"), "init-demo", "--out", str(var / "demo")],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        _manage(env, "ensure_demo_experiment", "--username", "ops")
        _wait_for("the web answering", lambda: _answers(stack.url), stack)
        log_in_session(stack.staff, stack)
        _wait_for("every service up", lambda: stack.health()["status"] == "ok", stack)
        yield stack
    finally:
        if supervisord.poll() is None:
            supervisord.send_signal(signal.SIGTERM)
            try:
                supervisord.wait(timeout=STOP_GUARD_S)
            except subprocess.TimeoutExpired:
                os.killpg(supervisord.pid, signal.SIGKILL)
        out.close()
        _forget(stack_redis)
        shutil.rmtree(var, ignore_errors=True)


def _answers(url: str) -> bool:
    try:
        requests.get(f"{url}/health.json", timeout=30)
        return True
    except requests.ConnectionError:
        return False


def _forget(url: str) -> None:
    """The stack's Redis database index: its run streams, queues and claim."""
    import redis

    client = redis.Redis.from_url(url)
    keys = [*client.scan_iter(match="rft:*"), *client.scan_iter(match="_kombu*"), CLAIM_KEY]
    client.delete(*keys)
    client.close()


# one metric point: (role, metric name, step, wall time); the time tells apart the timed
# system/* samples of one step
Point = tuple[str, str, int | None, float]


def _api_metric_points(stack: SupervisedStack, pk: int) -> list[Point]:
    names = stack.get(stack.api, f"/api/v1/runs/{pk}/metrics/").json()["names"]
    points: list[Point] = []
    for name in names:
        body = stack.get(stack.api, f"/api/v1/runs/{pk}/metrics/", params={"name": name})
        page = body.json()["points"]
        assert len(page) < 5000, f"{name}: more points than one page"
        points += [(p["role"], name, p["step"], p["wall_time"]) for p in page]
    return sorted(points, key=_point_order)


def _jsonl_metric_points(job_dir: Path) -> list[Point]:
    """Metric points the run wrote: the per-step metrics and the timed system/* samples (their
    own file, ``<role>_system.jsonl``; a sample lands when the run outlasts the interval)."""
    files = sorted(job_dir.rglob("*_metrics.jsonl"))
    assert files, f"no monitor JSONL under {job_dir}"
    files += sorted(job_dir.rglob("*_system.jsonl"))
    points: list[Point] = []
    for path in files:
        role = path.name.rsplit("_", 1)[0]
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                step, wall_time = row.pop("step", None), row.pop("time")
                points += [(role, name, step, wall_time) for name in row]
    return sorted(points, key=_point_order)


def _point_order(point: Point) -> tuple:
    role, name, step, wall_time = point
    return (role, name, -1 if step is None else step, wall_time)


def _same_points(stored: list[Point], written: list[Point]) -> bool:
    """Point by point, the times within a millisecond (the database keeps microseconds)."""
    return len(stored) == len(written) and all(
        a[:3] == b[:3] and abs(a[3] - b[3]) < 1e-3 for a, b in zip(stored, written, strict=True)
    )


def _restarts_logged(stack: SupervisedStack, name: str) -> list[str]:
    return [line for line in stack.log("restarts").splitlines() if f" of {name}:" in line]


def test_the_run_goes_on_while_each_process_of_the_stack_is_killed_and_restarted(supervised):
    stack = supervised
    experiment = _shortened_demo(stack)
    pk = stack.launch(experiment)
    stack.wait_run(pk, {"running"})
    # metrics are flowing: the ingestor has entries in hand when it is killed
    _wait_for(
        "the run's first metric points",
        lambda: stack.get(stack.api, f"/api/v1/runs/{pk}/metrics/").json()["names"],
        stack,
    )
    before = {name: stack.rpc.getProcessInfo(name)["pid"] for name in KILLED}
    for name in KILLED:
        os.kill(before[name], signal.SIGKILL)
        time.sleep(1)

    def all_back() -> bool:
        infos = {name: stack.rpc.getProcessInfo(name) for name in KILLED}
        return all(
            info["statename"] == "RUNNING" and info["pid"] != before[name]
            for name, info in infos.items()
        )

    _wait_for("every killed process running again", all_back, stack)
    for name in KILLED:
        (line,) = _restarts_logged(stack, name)
        assert "EXITED (unexpected)" in line, line
        assert read_counts(stack.var)[name].restarts == 1
    processes = _wait_for(
        "/health.json showing the restarts",
        lambda: (
            (p := stack.health()["supervisor"]["processes"])
            and all(p[n]["restarts"] == 1 for n in KILLED)
            and p
        ),
        stack,
    )
    assert {name: processes[name]["state"] for name in KILLED} == dict.fromkeys(KILLED, "RUNNING")
    assert processes["ray"]["restarts"] == 0 and processes["redis"]["restarts"] == 0
    page = stack.get(stack.staff, "/health/").text
    for name in KILLED:
        assert f'id="process-{name}" data-up="true" data-restarts="1"' in page
    # anonymous visitors: up or down per process, nothing more
    anonymous = stack.get(requests.Session(), "/health.json").json()["supervisor"]
    assert anonymous["in_use"] is True and "detail" not in anonymous
    assert anonymous["processes"]["ingestor"] == {"up": True}

    run = stack.wait_run(pk, {"succeeded"})
    written = _jsonl_metric_points(Path(run["job_dir"]))
    # the ingestor stores the run's last entries after the run ends: wait for them to land
    _wait_for(
        "the API's metric points to reach the JSONL's count",
        lambda: len(_api_metric_points(stack, pk)) >= len(written),
        stack,
        guard_s=60,
    )
    stored = _api_metric_points(stack, pk)
    # the same points, not only as many: one lost and another stored twice do not cancel out
    stored_keys, written_keys = Counter(p[:3] for p in stored), Counter(p[:3] for p in written)
    assert _same_points(stored, written), (
        f"{len(stored)} stored, {len(written)} written; (role, name, step) stored but not "
        f"written: {list((stored_keys - written_keys).items())[:5]}, written but not stored: "
        f"{list((written_keys - stored_keys).items())[:5]}"
    )


def test_a_dead_ray_head_loses_its_run_with_the_reason_and_comes_back(supervised):
    stack = supervised
    experiment = _shortened_demo(stack)
    pk = stack.launch(experiment)
    stack.wait_run(pk, {"running"})
    head = psutil.Process(stack.rpc.getProcessInfo("ray")["pid"])
    (gcs,) = [p for p in head.children(recursive=True) if p.name() == "gcs_server"]
    gcs.kill()
    run = stack.wait_run(pk, {"lost"})
    assert "Ray head was restarted" in run["exit_reason"], run
    _wait_for("the Ray head up again", lambda: stack.health()["services"]["ray"]["up"], stack)
    assert stack.health()["supervisor"]["processes"]["ray"]["restarts"] >= 1
    assert _restarts_logged(stack, "ray")
    # a new run is taken by the new head: submitted, and its job known to the job server there
    again = stack.launch(experiment)
    run = _wait_for(
        "the new run's job submitted",
        lambda: ((r := stack.run(again))["submission_id"] or r["is_final"]) and r,
        stack,
        guard_s=RUN_GUARD_S,
    )
    assert run["status"] in {"starting", "running", "succeeded"}, run
    job = requests.get(
        f"{stack.env['RAY_ADDRESS']}/api/jobs/{run['submission_id']}",
        headers=ray_auth_headers(),
        timeout=30,
    )
    assert job.status_code == 200, job.text
    assert job.json()["status"] in {"PENDING", "RUNNING", "SUCCEEDED"}, job.json()


def _processes_of(var: Path) -> list[psutil.Process]:
    """Every process started for the stack of ``var``, wherever it now hangs in the process
    tree (an orphan of a killed process included): supervisord gives its children
    RFT_VAR_DIR."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("RFT_VAR_DIR") == str(var):
                found.append(proc)
        except psutil.Error:  # gone meanwhile, or not ours to read
            pass
    return found


def test_sigint_to_supervisord_stops_every_process_ray_included(supervised):
    stack = supervised
    sup = psutil.Process(stack.supervisord.pid)
    tree = sup.children(recursive=True)
    assert {"gcs_server", "raylet"} <= {p.name() for p in tree}
    everything = {p.pid: p for p in [*tree, *_processes_of(stack.var)]}
    assert len(everything) > 10  # the stack's processes, Ray's and Celery's children
    stack.supervisord.send_signal(signal.SIGINT)
    assert stack.supervisord.wait(timeout=STOP_GUARD_S) == 0
    _, alive = psutil.wait_procs(everything.values(), timeout=STOP_GUARD_S)
    left = [(p.pid, p.name()) for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert left == []
    assert [(p.pid, p.name()) for p in _processes_of(stack.var)] == []
    assert not _answers(stack.url)
