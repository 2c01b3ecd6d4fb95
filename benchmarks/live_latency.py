"""Live run page latency: metric events written into a run's Redis stream at ``--rate``
events/s for ``--duration`` s while ``--clients`` WebSocket clients watch that run through a
real daphne and the real ingestor; prints p50/p95/p99 of stream write (the event's ``ts``) ->
client receipt, and the events each client lost or got twice (must be 0). Then the snapshot
(``GET /runs/<id>/live.json``, through daphne) of a run with ``--points`` metric points.

    .venv/bin/python benchmarks/live_latency.py [--rate 1000] [--duration 60] [--clients 50]
                                                [--points 100000]

Uses a fresh SQLite database in a temp dir, the Redis at REDIS_URL (its own run key and
consumer group), free ports; everything it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
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


async def bench(args) -> None:
    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user(
        "bench", password=None, id=random.randrange(10**9, 2 * 10**9)
    )
    experiment = Experiment.objects.create(owner=user, name="bench", config_yaml="", config={})
    run_key = f"bench{uuid.uuid4().hex[:10]}"
    # a pk no other stack on the shared Redis uses: Channels groups are named by pk
    run = Run.objects.create(
        pk=random.randrange(10**9, 2 * 10**9),
        experiment=experiment,
        number=1,
        key=run_key,
        status=RunStatus.RUNNING,
        config_yaml="",
    )
    cookie = session_cookie(user)
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    key = stream_key(run_key, settings.RFT_REDIS_PREFIX)
    client.sadd(runs_set(settings.RFT_REDIS_PREFIX), run_key)
    port = free_port()
    env = CHILD_ENV
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "daphne", "-v", "0", "-b", "127.0.0.1", "-p", str(port),
             "webapp.asgi:application"], cwd=ROOT, env=env, stderr=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [sys.executable, "-m", "workers.ingestor", "--group", f"bench-{run_key}",
             "--only-runs", run_key, "--block-ms", "20"], cwd=ROOT, env=env,
        ),
    ]  # fmt: skip
    try:
        origin = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as http:  # wait for daphne
            for _ in range(200):
                try:
                    async with http.get(f"{origin}/health/") as _answer:
                        break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.1)
        stop = asyncio.Event()
        outs = [
            {"latencies": [], "seqs": [], "connected": asyncio.Event()} for _ in range(args.clients)
        ]
        url = f"ws://127.0.0.1:{port}/ws/runs/{run.pk}/"
        tasks = [asyncio.create_task(watch(url, cookie, origin, stop, o)) for o in outs]
        await asyncio.wait_for(asyncio.gather(*(o["connected"].wait() for o in outs)), 60)
        load_before = os.getloadavg()
        print(f"{args.clients} clients connected; writing {args.rate}/s for {args.duration} s")
        written = await asyncio.to_thread(
            write_stream, client, key, run_key, args.rate, args.duration
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and min(len(o["seqs"]) for o in outs) < written:
            await asyncio.sleep(0.2)
        load_after = os.getloadavg()
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        latencies = [x for o in outs for x in o["latencies"]]
        lost = sum(len(set(range(1, written + 1)) - set(o["seqs"])) for o in outs)
        doubled = sum(len(o["seqs"]) - len(set(o["seqs"])) for o in outs)
        ms = [1000 * x for x in latencies]
        print(f"events written: {written}; received: {len(latencies)} over {args.clients} clients")
        print(
            f"latency stream write -> client: p50 {percentile(ms, 0.5):.0f} ms, "
            f"p95 {percentile(ms, 0.95):.0f} ms, p99 {percentile(ms, 0.99):.0f} ms, "
            f"max {max(ms):.0f} ms, mean {statistics.fmean(ms):.0f} ms"
        )
        print(f"lost: {lost}, doubled: {doubled}")
        print(f"load average (1, 5, 15 min) before {load_before}, after {load_after}")

        big = Run.objects.create(
            experiment=experiment, number=2, status=RunStatus.RUNNING, config_yaml=""
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
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)
        client.delete(key)
        client.srem(runs_set(settings.RFT_REDIS_PREFIX), run_key)
        client.delete(f"{settings.RFT_REDIS_NAMESPACE}ingest-lease:bench-{run_key}:{run_key}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=1000, help="events per second")
    parser.add_argument("--duration", type=float, default=60, help="seconds of writing")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--points", type=int, default=100_000, help="snapshot run's points")
    asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    main()
