"""Live run page latency: metric events written into a run's Redis stream at ``--rate``
events/s for ``--duration`` s while ``--clients`` WebSocket clients watch that run through a
real daphne and the real ingestor; prints p50/p95/p99 of stream write (the event's ``ts``) ->
client receipt, and the events each client lost or got twice (must be 0). Then the snapshot
(``GET /runs/<id>/live.json``, through daphne) of a run with ``--points`` metric points.

    .venv/bin/python benchmarks/live_latency.py [--rate 1000] [--duration 60] [--clients 50]
                                                [--points 100000] [--beside-demo [--niceness N]]

``--beside-demo`` measures twice in one run: first without training (the peer figure), then
beside the demo's training as ``make demo`` runs it (``DemoTraining``: the stack's Ray head, the
demo config submitted as a Ray job), and prints the trainer's steps/s in that window and the
ratios of the two: on a shared machine the ratios compare, the absolute figures do not.

Uses a fresh SQLite database in a temp dir, the Redis at REDIS_URL (its own run key and
consumer group), free ports; everything it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TMP = Path(tempfile.mkdtemp(prefix="rft-live-bench-"))
os.environ["DATABASE_URL"] = f"sqlite:///{TMP / 'db.sqlite3'}"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
os.environ.setdefault("RFT_REDIS_PREFIX", f"bench-{uuid.uuid4().hex[:8]}")  # its own deployment
CHILD_ENV = dict(os.environ)
# this script's own ORM calls run one at a time inside its event loop
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "1"

import django  # noqa: E402

django.setup()

import aiohttp  # noqa: E402
import redis  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import (  # noqa: E402
    BACKEND_SESSION_KEY,
    HASH_SESSION_KEY,
    SESSION_KEY,
    get_user_model,  # noqa: E402
)
from django.contrib.sessions.backends.db import SessionStore  # noqa: E402
from django.core.management import call_command  # noqa: E402

from rft_core.monitor import runs_set, stream_key  # noqa: E402
from webapp.experiments.models import Experiment  # noqa: E402
from webapp.runs.models import MetricPoint, Run, RunStatus  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def session_cookie(user) -> str:
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.save()
    return store.session_key


def write_stream(client: redis.Redis, key: str, run_key: str, rate: int, duration: float) -> int:
    """``rate`` events/s in ticks of 10 ms; returns the number written."""
    tick = 0.01
    per_tick = max(1, round(rate * tick))
    total = int(rate * duration)
    written = 0
    start = time.monotonic()
    while written < total:
        pipe = client.pipeline(transaction=False)
        for _ in range(min(per_tick, total - written)):
            written += 1
            fields = {"run": run_key, "kind": "metric", "role": "explorer", "stage": "rft",
                      "step": str(written), "ts": repr(time.time()),
                      "data": json.dumps({"bench/value": written / total})}  # fmt: skip
            pipe.xadd(key, fields)
        pipe.execute()
        sleep = start + (written / rate) - time.monotonic()
        if sleep > 0:
            time.sleep(sleep)
    return written


async def watch(url: str, cookie: str, origin: str, stop: asyncio.Event, out: dict) -> None:
    latencies, seqs = out["latencies"], out["seqs"]
    async with aiohttp.ClientSession(cookies={settings.SESSION_COOKIE_NAME: cookie}) as http:
        async with http.ws_connect(url, headers={"Origin": origin}, max_msg_size=0) as ws:
            out["connected"].set()
            while not stop.is_set():
                try:
                    msg = await asyncio.wait_for(ws.receive(), timeout=0.5)
                except TimeoutError:
                    continue
                if msg.type != aiohttp.WSMsgType.TEXT:
                    out["closed"] = msg.type
                    return
                now = time.time()
                body = json.loads(msg.data)
                if body.get("type") != "events":
                    continue
                for event in body["events"]:
                    seqs.append(event["seq"])
                    latencies.append(now - event["ts"])


class DemoTraining:
    """The demo's training as ``make demo`` runs it: a Ray head started by ``scripts/stack.py
    ray`` (the stack's own env: its ``RAY_worker_niceness`` default unless ``niceness`` is
    given) and ``trinity run`` of examples/demo/grpo_demo.yaml submitted to it as a Ray job, as
    the launch task submits a run, streaming its events under a run key of this deployment."""

    def __init__(self, niceness: int | None):
        sys.path.insert(0, str(ROOT / "scripts"))
        import stack

        self.var = TMP / "var"
        self.key = f"benchdemo{uuid.uuid4().hex[:8]}"
        self.stream = stream_key(self.key, settings.RFT_REDIS_PREFIX)
        self.client = redis.Redis.from_url(os.environ["REDIS_URL"])
        env = {k: v for k, v in CHILD_ENV.items() if k != "RAY_ADDRESS"}
        env.pop("RAY_worker_niceness", None)
        if niceness is not None:
            env["RAY_worker_niceness"] = str(niceness)
        self.niceness = niceness
        os.environ.pop("RAY_ADDRESS", None)
        self.env = {**env, "RFT_VAR_DIR": str(self.var), **stack._decide_ray()}
        # jobs run `trinity` of this venv (a Ray worker's PATH is the head's)
        self.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        self.address = self.env["RAY_ADDRESS"]
        self.head = None
        self.submitted = False

    def describe(self) -> str:
        return f"Ray head at {self.address}, actors at niceness {self.niceness_now}"

    def actors(self) -> list:
        """The head's actor processes (``ray::Trainer``, ...): not the job's supervisor and
        driver, which Ray runs at niceness 0 whatever RAY_worker_niceness says."""
        import psutil

        found = []
        for proc in psutil.Process(self.head.pid).children(recursive=True):
            try:
                title = " ".join(proc.cmdline()[:1])
            except psutil.Error:
                continue
            if title.startswith("ray::") and not title.startswith("ray::JobSupervisor"):
                found.append(proc)
        return found

    @property
    def niceness_now(self) -> str:
        """The actors' niceness above the head's (the web's, when the benchmark runs niced),
        and the cores they may run on."""
        import psutil

        base = psutil.Process(self.head.pid).nice()
        actors = self.actors()
        values = sorted({p.nice() - base for p in actors})
        cores = sorted({c for p in actors for c in p.cpu_affinity()})
        return f"{','.join(map(str, values)) or '?'} on cores {cores}"

    def renice(self, niceness: int, cores: int | None = None) -> None:
        """What RAY_worker_niceness would have started them with (an increment on the head's
        niceness, as Ray's), set on the running actors; ``cores``: keep them to the last that
        many cores (the web keeps the others), None: every core."""
        import psutil

        base = psutil.Process(self.head.pid).nice()
        every = list(range(psutil.cpu_count()))
        for proc in self.actors():
            proc.nice(min(19, base + niceness))
            proc.cpu_affinity(every[-cores:] if cores else every)

    def start(self, timeout_s: float = 900) -> None:
        """Head up, job submitted, and back once the trainer has finished a first step."""
        from webapp.health.checks import check_ray
        from webapp.runs import ray_jobs

        self.var.mkdir(parents=True, exist_ok=True)
        self.head = subprocess.Popen(
            [sys.executable, "scripts/stack.py", "ray"], cwd=ROOT, env=self.env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while not check_ray(self.address).up:
            if self.head.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the demo's Ray head did not answer at {self.address}")
            time.sleep(1)
        demo_dir = os.environ.get("RFT_DEMO_DIR", str(settings.RFT_DEMO_DIR))
        config = ROOT / "examples" / "demo" / "grpo_demo.yaml"
        ray_jobs.submit(
            f"cd {TMP} && trinity run --config {config}",
            f"rft-{self.key}",
            runtime_env={
                "env_vars": {
                    "RFT_EVENTS_REDIS_URL": os.environ["REDIS_URL"],
                    "RFT_REDIS_PREFIX": settings.RFT_REDIS_PREFIX,
                    "RFT_RUN_ID": self.key,
                    "RFT_DEMO_DIR": demo_dir,
                    "TRINITY_CHECKPOINT_ROOT_DIR": str(TMP / "checkpoints"),
                }
            },
            address=self.address,
        )
        self.submitted = True
        print(f"demo training submitted to {self.address}; waiting for its first trainer step")
        while not self.step_times(0, time.time() + 60):
            state = ray_jobs.status(f"rft-{self.key}", address=self.address)
            if state.terminal:
                log = ray_jobs.logs(f"rft-{self.key}", address=self.address)
                raise RuntimeError(f"the demo training ended {state.status}: {log[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the demo training made no step in {timeout_s:.0f} s")
            time.sleep(2)

    def step_times(self, start: float, end: float) -> list[float]:
        """When the trainer finished each training step between those unix times (the times of
        its first metric event with a training metric; ``system/`` metrics come at step 0 too)."""
        entries = self.client.xrange(self.stream, f"{int(start * 1000)}-0", f"{int(end * 1000)}-0")
        seen: dict[tuple, float] = {}
        for _, f in entries:
            if f.get(b"kind") != b"metric" or f.get(b"role") != b"trainer":
                continue
            if all(name.startswith("system/") for name in json.loads(f[b"data"])):
                continue
            seen.setdefault((f.get(b"stage"), f.get(b"step")), float(f[b"ts"]))
        return sorted(seen.values())

    def stop(self) -> None:
        from webapp.runs import ray_jobs

        try:
            if self.submitted:
                ray_jobs.stop(f"rft-{self.key}", address=self.address, timeout_s=120)
        finally:
            if self.head is not None:
                self.head.send_signal(signal.SIGTERM)
                self.head.wait(timeout=120)
            self.client.delete(self.stream)
            self.client.srem(runs_set(settings.RFT_REDIS_PREFIX), self.key)


def new_run(experiment: Experiment, number: int) -> Run:
    # a pk no other stack on the shared Redis uses: Channels groups are named by pk
    return Run.objects.create(
        pk=random.randrange(10**9, 2 * 10**9),
        experiment=experiment,
        number=number,
        key=f"bench{uuid.uuid4().hex[:10]}",
        status=RunStatus.RUNNING,
        config_yaml="",
    )


async def measure(args, run: Run, origin: str, cookie: str, client: redis.Redis) -> dict:
    """``--clients`` sockets on ``run``, ``--rate`` events/s into its stream for ``--duration``
    s; prints and returns the latency percentiles (ms), lost/doubled and the window."""
    key = stream_key(run.key, settings.RFT_REDIS_PREFIX)
    client.sadd(runs_set(settings.RFT_REDIS_PREFIX), run.key)
    stop = asyncio.Event()
    outs = [
        {"latencies": [], "seqs": [], "connected": asyncio.Event()} for _ in range(args.clients)
    ]
    url = f"ws://{origin.removeprefix('http://')}/ws/runs/{run.pk}/"
    tasks = [asyncio.create_task(watch(url, cookie, origin, stop, o)) for o in outs]
    await asyncio.wait_for(asyncio.gather(*(o["connected"].wait() for o in outs)), 60)
    load_before = os.getloadavg()
    print(f"{args.clients} clients connected; writing {args.rate}/s for {args.duration} s")
    started = time.time()
    written = await asyncio.to_thread(write_stream, client, key, run.key, args.rate, args.duration)
    ended = time.time()
    # late is not lost: wait while deliveries still come (a loaded machine drains slowly)
    received, quiet_since = -1, time.monotonic()
    while min(len(o["seqs"]) for o in outs) < written and time.monotonic() - quiet_since < 10:
        await asyncio.sleep(0.2)
        now_received = sum(len(o["seqs"]) for o in outs)
        if now_received != received:
            received, quiet_since = now_received, time.monotonic()
    load_after = os.getloadavg()
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    ms = [1000 * x for o in outs for x in o["latencies"]]
    figures = {
        "p50": percentile(ms, 0.5),
        "p95": percentile(ms, 0.95),
        "p99": percentile(ms, 0.99),
        "lost": sum(len(set(range(1, written + 1)) - set(o["seqs"])) for o in outs),
        "doubled": sum(len(o["seqs"]) - len(set(o["seqs"])) for o in outs),
        "window": (started, ended),
        "load": (load_before[0], load_after[0]),
    }
    print(f"events written: {written}; received: {len(ms)} over {args.clients} clients")
    print(
        f"latency stream write -> client: p50 {figures['p50']:.0f} ms, "
        f"p95 {figures['p95']:.0f} ms, p99 {figures['p99']:.0f} ms, "
        f"max {max(ms):.0f} ms, mean {statistics.fmean(ms):.0f} ms"
    )
    print(f"lost: {figures['lost']}, doubled: {figures['doubled']}")
    print(f"load average (1, 5, 15 min) before {load_before}, after {load_after}")
    return figures


async def snapshot(args, experiment: Experiment, origin: str, cookie: str) -> None:
    big = Run.objects.create(
        experiment=experiment, number=99, status=RunStatus.RUNNING, config_yaml=""
    )
    names = [f"metric/{i}" for i in range(20)]
    points = [
        MetricPoint(run=big, name=names[i % 20], role="explorer", stage="rft",
                    step=i // 20, wall_time=1.7e9 + i, value=i / args.points)
        for i in range(args.points)
    ]  # fmt: skip
    MetricPoint.objects.bulk_create(points, batch_size=5000)
    times = []
    cookies = {settings.SESSION_COOKIE_NAME: cookie}
    async with aiohttp.ClientSession(cookies=cookies) as http:
        for _ in range(5):
            start = time.perf_counter()
            async with http.get(f"{origin}/runs/{big.pk}/live.json") as answer:
                body = await answer.read()
            times.append(time.perf_counter() - start)
    count = sum(len(s["value"]) for s in json.loads(body)["metrics"].values())
    print(
        f"snapshot of a run with {count} metric points ({len(body) / 1e6:.1f} MB JSON) "
        f"through daphne: best {min(times) * 1000:.0f} ms, "
        f"median {statistics.median(times) * 1000:.0f} ms of 5"
    )


def report_beside(quiets: list[dict], rows: list[tuple]) -> None:
    """One line per niceness: the figures beside the training, their ratio to the quiet peer
    (the mean of the runs before and after the training), the trainer's pace in that window."""
    peer = {q: statistics.fmean(x[q] for x in quiets) for q in ("p50", "p95", "p99")}
    print(
        f"quiet peer (mean of {len(quiets)}): p50 {peer['p50']:.0f} / p95 {peer['p95']:.0f} / "
        f"p99 {peer['p99']:.0f} ms; lost {sum(x['lost'] for x in quiets)}, "
        f"doubled {sum(x['doubled'] for x in quiets)}"
    )
    print("niceness | p50 / p95 / p99 ms | p95 / quiet | lost / doubled | trainer steps/s | load")
    for niceness, busy, times in rows:
        seconds = busy["window"][1] - busy["window"][0]
        pace = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else float("nan")
        print(
            f"{niceness} | {busy['p50']:.0f} / {busy['p95']:.0f} / {busy['p99']:.0f} | "
            f"x{busy['p95'] / max(peer['p95'], 1e-9):.2f} | {busy['lost']} / {busy['doubled']} | "
            f"{pace:.3f} ({len(times)} steps in {seconds:.0f} s) | "
            f"{busy['load'][0]:.1f}-{busy['load'][1]:.1f}"
        )


async def bench(args) -> None:
    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user(
        "bench", password=None, id=random.randrange(10**9, 2 * 10**9)
    )
    experiment = Experiment.objects.create(owner=user, name="bench", config_yaml="", config={})
    # the quiet peer, one run beside the training at each niceness, the quiet peer again after
    sweep = args.sweep if args.beside_demo else []
    runs = [new_run(experiment, n) for n in range(1, len(sweep) + (3 if args.beside_demo else 2))]
    peer = runs[0]
    cookie = session_cookie(user)
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    port = free_port()
    env = CHILD_ENV
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "daphne", "-v", "0", "-b", "127.0.0.1", "-p", str(port),
             "webapp.asgi:application"], cwd=ROOT, env=env, stderr=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [sys.executable, "-m", "workers.ingestor", "--group", f"bench-{peer.key}",
             "--only-runs", ",".join(r.key for r in runs), "--block-ms", "20"],
            cwd=ROOT, env=env,
        ),
    ]  # fmt: skip
    training = None
    try:
        origin = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as http:  # wait for daphne
            for _ in range(200):
                try:
                    async with http.get(f"{origin}/health/") as _answer:
                        break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.1)
        print("== quiet: no training" if args.beside_demo else "== live page")
        quiets = [await measure(args, peer, origin, cookie, client)]
        rows = []
        if args.beside_demo:
            training = DemoTraining(args.niceness)
            await asyncio.to_thread(training.start)
            for run, setting in zip(runs[1:], sweep, strict=False):
                if setting is not None:
                    training.renice(*setting)
                print(f"== beside the demo training ({training.describe()})")
                busy = await measure(args, run, origin, cookie, client)
                rows.append((training.niceness_now, busy, training.step_times(*busy["window"])))
            training.stop()
            training = None
            print("== quiet again: the training stopped")
            quiets.append(await measure(args, runs[-1], origin, cookie, client))
            report_beside(quiets, rows)
        if args.points and not args.beside_demo:
            await snapshot(args, experiment, origin, cookie)
    finally:
        if training is not None:
            training.stop()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)
        for run in runs:
            client.delete(stream_key(run.key, settings.RFT_REDIS_PREFIX))
            client.srem(runs_set(settings.RFT_REDIS_PREFIX), run.key)
            client.delete(f"{settings.RFT_REDIS_NAMESPACE}ingest-lease:bench-{peer.key}:{run.key}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=1000, help="events per second")
    parser.add_argument("--duration", type=float, default=60, help="seconds of writing")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--points", type=int, default=100_000, help="snapshot run's points")
    parser.add_argument(
        "--beside-demo",
        action="store_true",
        help="measure twice: without, then beside the demo's training as `make demo` runs it",
    )
    parser.add_argument(
        "--niceness",
        type=int,
        default=None,
        help="RAY_worker_niceness of the demo's actors (default: the stack's)",
    )
    parser.add_argument(
        "--sweep",
        type=lambda text: [tuple(int(n) for n in item.split("/")) for item in text.split(",")],
        default=[None],
        help="with --beside-demo: measure at each of these actor niceness values (e.g. 0,5,10; "
        "10/1: niceness 10 on one core), the running actors reniced between windows: one "
        "training, adjacent windows",
    )
    asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    main()
