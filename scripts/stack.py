#!/usr/bin/env python
"""The local stack of `make demo` / `make test`: decide addresses, check ports, start services.

    python scripts/stack.py prepare      # before anything starts: ports, Redis, Ray, DB -> var/run.env
    python scripts/stack.py supervise    # Procfile + var/run.env -> var/supervisord.conf; run it
    python scripts/stack.py redis        # Procfile: the embedded redis-server, or wait on the external one
    python scripts/stack.py ray          # Procfile: a Ray head (2 CPUs), or wait on RAY_ADDRESS
    python scripts/stack.py wait redis|web   # block until that service answers (Procfile ordering)
    python scripts/stack.py postgres-url # print DATABASE_URL of a PostgreSQL that answers, else nothing
    python scripts/stack.py check-db     # one line instead of a traceback when the database is down
    python scripts/stack.py vendor-static  # copy plotly.min.js from the plotly wheel to static/vendor/

Every problem a user can meet here (a taken port, a Redis or Ray or database that does not
answer) is one line on stderr naming the service and how to fix it, and exit code 1.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workers.services import (  # noqa: E402
    first_free_port,
    port_is_free,
    redis_answers,
    redis_server_command,
)

VAR = Path(os.environ.get("RFT_VAR_DIR", ROOT / "var"))
ENV_FILE = VAR / "run.env"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
PG_CANDIDATE = "postgres://postgres@127.0.0.1:5432/test"
# The Ray actors' niceness above the web's (RAY_worker_niceness; the job's driver stays at 0).
# The demo trains on the cores the run page is served from: at 10 the web (daphne, ingestor)
# wins them when it has work and the training keeps the rest; Ray's own 15 starved the actors
# on a busy machine. live_latency.py --beside-demo at 1,000 events/s x 50 clients, 2 cores:
# p95 532 ms at 10 vs 992 ms at 0, trainer -8% steps/s (benchmarks/README.md).
ACTOR_NICENESS = "10"


class StackError(Exception):
    """One line for the user; exit 1."""


def fail(message: str) -> int:
    print(f"make: {message}", file=sys.stderr)
    return 1


def prepare() -> int:
    """Decide every address, check every port, write var/run.env (read by `supervise`)."""
    VAR.mkdir(parents=True, exist_ok=True)
    (VAR / "log").mkdir(exist_ok=True)
    web_port = int(os.environ.get("RFT_WEB_PORT", "8000"))
    if not port_is_free(web_port):
        raise StackError(
            f"port {web_port} is already taken (another web server?); stop it or run "
            f"`make demo RFT_WEB_PORT={web_port + 1}`"
        )
    env = {"RFT_WEB_PORT": str(web_port), "DJANGO_SETTINGS_MODULE": "webapp.settings"}
    env.update(_decide_redis())
    env.update(_decide_ray())
    _check_database()
    ENV_FILE.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    for key, value in env.items():
        print(f"  {key}={value}")
    return 0


def _decide_redis() -> dict[str, str]:
    url = os.environ.get("REDIS_URL")
    if url:
        if not redis_answers(url):
            raise StackError(
                f"Redis at REDIS_URL={url} does not answer; start it, or unset REDIS_URL to use "
                "the embedded redis-server"
            )
        return {"REDIS_URL": url, "RFT_EMBEDDED_REDIS_PORT": ""}
    if redis_answers(DEFAULT_REDIS):
        return {"REDIS_URL": DEFAULT_REDIS, "RFT_EMBEDDED_REDIS_PORT": ""}
    port = 6379 if port_is_free(6379) else first_free_port(6380)
    return {"REDIS_URL": f"redis://127.0.0.1:{port}/0", "RFT_EMBEDDED_REDIS_PORT": str(port)}


def _decide_ray() -> dict[str, str]:
    address = os.environ.get("RAY_ADDRESS")
    if address:
        sys.path.insert(0, str(ROOT))
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
        from webapp.health.checks import check_ray

        status = check_ray(address)
        if not status.up:
            raise StackError(f"Ray: {status.detail}")
        return {"RAY_ADDRESS": address, "RFT_RAY_HEAD": "0"}
    dashboard = 8265 if port_is_free(8265) else first_free_port(8266)
    return {
        "RAY_ADDRESS": f"http://127.0.0.1:{dashboard}",
        "RFT_RAY_HEAD": "1",
        "RFT_RAY_DASHBOARD_PORT": str(dashboard),
        "RFT_RAY_GCS_PORT": str(first_free_port(6390)),
        # Ray's worker ports are 10002-19999: the client server must sit outside them.
        "RFT_RAY_CLIENT_PORT": str(10001 if port_is_free(10001) else first_free_port(20001)),
        "RFT_RAY_AGENT_PORT": str(first_free_port(52365)),
    }


def _check_database() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django
    from django.db import connection
    from django.db.utils import OperationalError

    django.setup()
    try:
        connection.ensure_connection()
    except OperationalError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise StackError(
            f"database {connection.settings_dict.get('NAME')} ({connection.vendor}) is unreachable: "
            f"{first}; start it or fix DATABASE_URL (unset it to use SQLite in var/)"
        ) from err


def check_db() -> int:
    _check_database()
    return 0


def _ray_temp_dir() -> str:
    # Short and unique per var dir (a checkout's demo, a test's stack): Ray puts Unix sockets
    # under it (108-byte path limit), and the leftovers of a dead head are found by it.
    return f"/tmp/rft-ray-{hashlib.sha1(str(VAR.resolve()).encode()).hexdigest()[:8]}"


def supervise() -> int:
    """Write var/supervisord.conf from the Procfile and var/run.env, then become supervisord
    in the foreground (workers/supervision.py says how it runs each process)."""
    from workers.supervision import SupervisionError, write_config

    if not ENV_FILE.exists():
        raise StackError(f"{ENV_FILE} is missing; run `python scripts/stack.py prepare` first")
    try:
        conf = write_config(ROOT / "Procfile", ENV_FILE, VAR)
    except SupervisionError as err:
        raise StackError(str(err)) from err
    supervisord = str(Path(sys.executable).parent / "supervisord")
    os.execv(supervisord, [supervisord, "--nodaemon", "--configuration", str(conf)])
    return 0  # not reached


def run_redis() -> int:
    port = os.environ.get("RFT_EMBEDDED_REDIS_PORT")
    if not port:
        print(
            f"using the Redis that answers at {os.environ.get('REDIS_URL', DEFAULT_REDIS)}",
            flush=True,
        )
        return _wait_for_signal()
    os.execv(*_argv(redis_server_command(int(port), VAR / "redis")))
    return 0  # not reached


def _argv(cmd: list[str]) -> tuple[str, list[str]]:
    return cmd[0], cmd


def run_ray() -> int:
    if os.environ.get("RFT_RAY_HEAD") != "1":
        print(f"using the Ray cluster at RAY_ADDRESS={os.environ.get('RAY_ADDRESS')}", flush=True)
        return _wait_for_signal()
    temp_dir = _ray_temp_dir()
    # A head of this var dir that died (its `ray start` killed, its gcs_server gone) may have
    # left processes holding the ports: stop them before a new head takes the same ports.
    _stop_leftovers([], temp_dir)
    cmd = [
        str(Path(sys.executable).parent / "ray"), "start", "--head", "--block",
        "--num-cpus", os.environ.get("RFT_RAY_NUM_CPUS", "2"),
        "--port", os.environ["RFT_RAY_GCS_PORT"],
        "--dashboard-host", "127.0.0.1",
        "--dashboard-port", os.environ["RFT_RAY_DASHBOARD_PORT"],
        "--ray-client-server-port", os.environ["RFT_RAY_CLIENT_PORT"],
        "--dashboard-agent-listen-port", os.environ["RFT_RAY_AGENT_PORT"],
        "--temp-dir", temp_dir,
        "--disable-usage-stats",
    ]  # fmt: skip
    # No 30 s drain on SIGTERM: nothing else schedules on this one-node head.
    env = {
        **os.environ,
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
        "RAY_worker_niceness": os.environ.get("RAY_worker_niceness", ACTOR_NICENESS),
    }
    head = subprocess.Popen(cmd, env=env)
    import psutil

    tree: dict[int, psutil.Process] = {}

    def forward(signum, frame) -> None:
        _remember_tree(head.pid, tree)
        if head.poll() is None:
            head.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while head.poll() is None:
        _remember_tree(head.pid, tree)
        time.sleep(2)
    _stop_leftovers(list(tree.values()), temp_dir)
    return head.returncode


def _remember_tree(pid: int, tree: dict) -> None:
    import psutil

    try:
        for child in psutil.Process(pid).children(recursive=True):
            tree.setdefault(child.pid, child)
    except psutil.NoSuchProcess:
        pass


def _stop_leftovers(known: list, temp_dir: str) -> None:
    """Stop Ray processes of *this* head that outlived it: its remembered process tree, and any
    process whose command line names its own temp dir. Never `ray stop`, which would stop every
    Ray on the machine."""
    import psutil

    mine = [p for p in known if p.is_running()]
    seen = {p.pid for p in mine}
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid not in seen and any(temp_dir in part for part in proc.info["cmdline"] or []):
            mine.append(proc)
    for proc in mine:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(mine, timeout=3)
    for proc in alive:
        proc.kill()
    psutil.wait_procs(alive, timeout=3)
    if mine:
        print(f"stopped {len(mine)} leftover Ray process(es) of this head", flush=True)


def _wait_for_signal() -> int:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    while not stop:
        time.sleep(0.5)
    return 0


def wait(service: str, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service == "redis" and redis_answers(os.environ.get("REDIS_URL", DEFAULT_REDIS), 0.5):
            return 0
        if service == "web" and _http_ok(
            f"http://127.0.0.1:{os.environ.get('RFT_WEB_PORT', '8000')}/health.json"
        ):
            return 0
        time.sleep(0.3)
    raise StackError(f"{service} did not answer within {timeout:.0f} s")


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # it answered (503 = some service is down, the page still works)
    except OSError:
        return False


def vendor_static() -> int:
    """Copy plotly.min.js from the plotly wheel into static/vendor/ (gitignored; no CDN)."""
    import shutil

    import plotly

    source = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    target = ROOT / "static" / "vendor" / "plotly.min.js"
    if target.exists() and target.stat().st_size == source.stat().st_size:
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    print(
        f"copied {source.name} ({source.stat().st_size // 1024} KiB) to {target.relative_to(ROOT)}"
    )
    return 0


def postgres_url() -> int:
    """Print the PostgreSQL URL for the second test pass when a server answers there."""
    import psycopg

    url = os.environ.get("RFT_TEST_POSTGRES_URL", PG_CANDIDATE)
    try:
        psycopg.connect(url.replace("postgres://", "postgresql://", 1), connect_timeout=2).close()
    except psycopg.Error:
        return 0
    print(url)
    return 0


def main(argv: list[str]) -> int:
    commands = {
        "prepare": prepare,
        "supervise": supervise,
        "redis": run_redis,
        "ray": run_ray,
        "postgres-url": postgres_url,
        "vendor-static": vendor_static,
        "check-db": check_db,
    }
    try:
        if len(argv) == 2 and argv[0] == "wait":
            return wait(argv[1])
        if len(argv) == 1 and argv[0] in commands:
            return commands[argv[0]]()
    except StackError as err:
        return fail(str(err))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
