"""Two deployments on one Redis server and database, told apart by their prefix alone
(``RFT_REDIS_PREFIX``, webapp/settings.py): a live message of one never reaches a page of the
other, an ingestor never reads the other's run streams, and everything a deployment puts in
Redis (keys, streams, Celery's queues and results, pub/sub channels) lies under its
``rft:<prefix>:``."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
from asgiref.sync import async_to_sync
from django.conf import settings
from django.utils.module_loading import import_string
from redis_claim import claim_db, release

from rft_core.monitor import ENV_REDIS_PREFIX, ENV_REDIS_URL, ENV_RUN_ID, build_monitor
from webapp.events.models import RunEvent
from webapp.runs.models import RunStatus
from webapp.settings import redis_prefixed_settings
from workers.ingestor import Ingestor

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


def _layer(prefix: str, redis_url: str):
    """The channel layer a deployment of ``prefix`` builds from its settings."""
    config = redis_prefixed_settings(prefix, redis_url)["CHANNEL_LAYERS"]["default"]
    return import_string(config["BACKEND"])(**config["CONFIG"])


def _forget(client: redis.Redis, *prefixes: str) -> None:
    for prefix in prefixes:
        keys = list(client.scan_iter(match=f"rft:{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)


def test_a_group_message_never_reaches_a_member_of_another_deployment(redis_url, unique_id):
    a, b = _layer(f"a-{unique_id}", redis_url), _layer(f"b-{unique_id}", redis_url)
    group = "run-1"  # run #1 of each deployment: the same group name

    async def scenario():
        in_a, in_b = await a.new_channel(), await b.new_channel()
        await a.group_add(group, in_a)
        await b.group_add(group, in_b)
        # each member first hears its own deployment: both subscriptions are live
        await a.group_send(group, {"type": "ready"})
        await b.group_send(group, {"type": "ready"})
        got = [await a.receive(in_a), await b.receive(in_b)]
        # a publishes before b (each publish answered before the next): had b's member heard
        # a's message, that message would come first for it; then the other way round
        await a.group_send(group, {"type": "run", "from": "a"})
        await b.group_send(group, {"type": "run", "from": "b"})
        got += [await a.receive(in_a), await b.receive(in_b)]
        await b.group_send(group, {"type": "run", "from": "b2"})
        await a.group_send(group, {"type": "run", "from": "a2"})
        got += [await a.receive(in_a), await b.receive(in_b)]
        await a.flush()
        await b.flush()
        return got

    async def within_30_s():
        return await asyncio.wait_for(scenario(), 30)

    got = async_to_sync(within_30_s)()
    assert got == [
        {"type": "ready"},
        {"type": "ready"},
        {"type": "run", "from": "a"},
        {"type": "run", "from": "b"},
        {"type": "run", "from": "a2"},
        {"type": "run", "from": "b2"},
    ]


def _write(job, monkeypatch, redis_url: str, prefix: str, run_key: str, state: str) -> None:
    """A heartbeat and a status event of ``run_key`` through the monitor of a run whose
    launch gave it ``prefix`` (RFT_REDIS_PREFIX)."""
    monkeypatch.setenv(ENV_REDIS_URL, redis_url)
    monkeypatch.setenv(ENV_REDIS_PREFIX, prefix)
    monkeypatch.setenv(ENV_RUN_ID, run_key)
    monkeypatch.setenv("RFT_HEARTBEAT_S", "3600")
    with build_monitor("none", {}, job, role="trainer", run_name="demo") as monitor:
        monitor.status(state, f"{state} in {prefix}")


def test_an_ingestor_reads_only_the_streams_of_its_own_deployment(
    run, tmp_path, monkeypatch, redis_url, redis_client, unique_id
):
    a, b = f"a-{unique_id}", f"b-{unique_id}"
    # both deployments have a run of this key; b's says it was cancelled
    _write(tmp_path / "a", monkeypatch, redis_url, a, run.key, "running")
    _write(tmp_path / "b", monkeypatch, redis_url, b, run.key, "cancelled")
    ingestor_a = Ingestor(redis.Redis.from_url(redis_url), "c", only_runs={run.key}, prefix=a)
    ingestor_b = Ingestor(redis.Redis.from_url(redis_url), "c", only_runs={run.key}, prefix=b)
    try:
        assert ingestor_a.poll(block_ms=100) == 2  # its own heartbeat and status, nothing of b's
        texts = list(RunEvent.objects.values_list("payload__message", flat=True))
        assert texts == [None, f"running in {a}"]
        run.refresh_from_db()
        assert run.status == RunStatus.RUNNING
        # b's stream is as b's monitor left it: a made no consumer group on it, read nothing
        b_stream = f"{ingestor_b.stream_prefix}{run.key}"
        assert redis_client.xlen(b_stream) == 2 and redis_client.xinfo_groups(b_stream) == []
        assert ingestor_a.poll(block_ms=100) == 0
        # and the other way round: b's ingestor reads b's two entries only
        assert ingestor_b.poll(block_ms=100) == 2
        assert ingestor_b.poll(block_ms=100) == 0
        assert RunEvent.objects.count() == 4
    finally:
        ingestor_a.release()
        ingestor_b.release()
        _forget(redis_client, a, b)


# ---------------------------------------------------------------- every key and channel

# Commands whose arguments name no key or channel.
KEYLESS = {
    "AUTH", "CLIENT", "CLUSTER", "COMMAND", "CONFIG", "DBSIZE", "ECHO", "EXEC", "HELLO", "INFO",
    "MULTI", "PING", "QUIT", "READONLY", "RESET", "SCRIPT", "SELECT", "TIME", "UNWATCH",
    "PUNSUBSCRIBE", "UNSUBSCRIBE",  # without arguments: from everything
}  # fmt: skip
# Commands whose every argument is a key or channel (BRPOP/BLPOP: but the timeout).
ALL_ARGS = {"DEL", "EXISTS", "MGET", "SUBSCRIBE", "PSUBSCRIBE", "UNLINK", "WATCH"}
BLOCKING_POPS = {"BRPOP", "BLPOP", "BZPOPMIN", "BZPOPMAX"}
FIRST_ARG = {
    "APPEND", "DECR", "DECRBY", "EXPIRE", "GET", "GETDEL", "HDEL", "HGET", "HGETALL", "HINCRBY",
    "HKEYS", "HLEN", "HMGET", "HMSET", "HSET", "HSETNX", "INCR", "INCRBY", "LINDEX", "LLEN",
    "LPOP", "LPUSH", "LRANGE", "LREM", "LTRIM", "PEXPIRE", "PTTL", "PUBLISH", "RPOP", "RPUSH",
    "SADD", "SCARD", "SET", "SETEX", "SETNX", "SISMEMBER", "SMEMBERS", "SPUBLISH", "SREM", "TTL",
    "TYPE", "XACK", "XADD", "XAUTOCLAIM", "XCLAIM", "XDEL", "XLEN", "XPENDING", "XRANGE",
    "XREVRANGE", "XTRIM", "ZADD", "ZCARD", "ZRANGE", "ZRANGEBYSCORE", "ZREM", "ZREMRANGEBYSCORE",
    "ZREVRANGEBYSCORE", "ZSCORE", "PEXPIREAT", "EXPIREAT", "GETSET",
}  # fmt: skip
QUOTED = re.compile(r'"((?:\\.|[^"\\])*)"')


def named_keys(args: list[str]) -> list[str] | None:
    """The keys and channels a command (as MONITOR shows it) names; None when unknown."""
    name, rest = args[0].upper(), args[1:]
    if name in KEYLESS:
        return []
    if name in ALL_ARGS:
        return rest
    if name in BLOCKING_POPS:
        return rest[:-1]
    if name in FIRST_ARG:
        return rest[:1]
    if name in ("EVAL", "EVALSHA"):
        return rest[2 : 2 + int(rest[1])]
    if name in ("XGROUP", "XINFO"):  # XGROUP CREATE <key> ..., XINFO GROUPS <key>
        return rest[1:2] if len(rest) > 1 and rest[0].upper() != "HELP" else []
    if name in ("XREADGROUP", "XREAD"):
        streams = [a.upper() for a in rest].index("STREAMS")
        named = rest[streams + 1 :]
        return named[: len(named) // 2]
    if name == "SCAN":  # only a match pattern names keys
        upper = [a.upper() for a in rest]
        return [rest[upper.index("MATCH") + 1]] if "MATCH" in upper else ["<unmatched SCAN>"]
    return None


class CommandLog(threading.Thread):
    """Every command Redis runs on database ``db`` (MONITOR, Lua scripts' calls included),
    as argument lists, until a client echoes ``stop``."""

    def __init__(self, url: str, db: int, stop: str):
        super().__init__(daemon=True)
        self.url, self.db, self.stop = url, db, stop
        self.commands: list[list[str]] = []
        self.ready = threading.Event()

    def run(self) -> None:
        client = redis.Redis.from_url(self.url, decode_responses=True)
        with client.monitor() as monitor:
            self.ready.set()
            while True:
                try:
                    line = monitor.connection.read_response()
                except redis.TimeoutError:
                    continue  # a quiet second; MONITOR goes on
                if isinstance(line, bytes):
                    line = line.decode(errors="replace")
                # '<time> [<db> <client>] "CMD" "arg"...'
                if line == "OK" or line.split(" ", 2)[1] != f"[{self.db}":
                    continue
                args = [a.encode().decode("unicode_escape") for a in QUOTED.findall(line)]
                if args[:2] == ["ECHO", self.stop] or args[:2] == ["echo", self.stop]:
                    return
                self.commands.append(args)


def test_every_key_and_channel_of_a_task_round_trip_and_an_ingested_run_carries_the_prefix(
    run, tmp_path, monkeypatch, redis_url, unique_id, celery_worker_at
):
    from celery import Celery

    namespace = settings.RFT_REDIS_NAMESPACE
    url = claim_db(redis_url, unique_id)  # a database index with nobody else's commands
    db = int(urlsplit(url).path.lstrip("/"))
    client = redis.Redis.from_url(url)
    before = {k.decode() for k in client.scan_iter(count=1000)}  # a crashed test's leftovers
    log = CommandLog(url, db, stop=f"stop-{unique_id}")
    try:
        log.start()
        log.ready.wait(10)
        # a Celery task round trip through a worker as `make demo` starts it (gossip, mingle,
        # heartbeats on), its broker and results on that database, this session's prefix
        prefixed = redis_prefixed_settings(settings.RFT_REDIS_PREFIX, url)
        app = Celery("prefix-test", broker=url, backend=url)
        app.conf.broker_transport_options = prefixed["CELERY_BROKER_TRANSPORT_OPTIONS"]
        app.conf.result_backend_transport_options = prefixed[
            "CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS"
        ]
        queue = f"q-{unique_id}"
        with celery_worker_at(app, url, queue, unique_id, "--concurrency", "1"):
            assert app.send_task("workers.add", args=(2, 3), queue=queue).get(timeout=60) == 5
        # a run's events written by its monitor, ingested and sent live to a watching member
        monkeypatch.setenv(ENV_REDIS_URL, url)
        monkeypatch.setenv(ENV_RUN_ID, run.key)
        monkeypatch.setenv("RFT_HEARTBEAT_S", "3600")
        with build_monitor("none", {}, tmp_path, role="trainer", run_name="demo") as monitor:
            monitor.log({"actor/pg_loss": 0.5}, step=1)
        layer = _layer(settings.RFT_REDIS_PREFIX, url)
        ingestor = Ingestor(
            redis.Redis.from_url(url), "c", only_runs={run.key}, channel_layer=layer
        )

        async def watch():
            member = await layer.new_channel()
            await layer.group_add(f"run-{run.pk}", member)
            await layer.group_send(f"run-{run.pk}", {"type": "ready"})
            assert await layer.receive(member) == {"type": "ready"}  # subscribed
            handled = await asyncio.to_thread(ingestor.poll, 100)
            while json.loads((await layer.receive(member))["text"])["type"] != "events":
                pass  # the run's state first, then the events batch
            await layer.flush()
            return handled

        async def watched():
            return await asyncio.wait_for(watch(), 30)

        assert async_to_sync(watched)() == 2
        ingestor.release()
        client.echo(log.stop)
        log.join(30)
        keys = sorted({k.decode() for k in client.scan_iter(count=1000)} - before)
    finally:
        if log.is_alive():
            client.echo(log.stop)
        _forget(client, settings.RFT_REDIS_PREFIX)
        release(url)
        client.close()

    assert keys, "the round trip left no key to check"
    assert [k for k in keys if not k.startswith(namespace)] == []
    named = {tuple(args): named_keys(args) for args in log.commands}
    assert [args[:3] for args, found in named.items() if found is None] == []  # all understood
    offending = sorted({k for found in named.values() for k in found or []
                        if not k.startswith(namespace)})  # fmt: skip
    assert offending == []
    seen = {args[0].upper() for args in log.commands}
    # the commands of every path were seen: queues, results, pub/sub, streams
    assert {"LPUSH", "BRPOP", "PUBLISH", "SUBSCRIBE", "XADD", "XREADGROUP", "SADD"} <= seen


def _start_up_lines(args: list[str], env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0, args
    return (done.stdout + done.stderr).strip().splitlines()


def test_an_invalid_prefix_stops_each_process_with_one_line(tmp_path):
    """manage.py, daphne, the ingestor, a Celery worker and beat: one line naming the setting
    and the rule, a non-zero exit, no traceback."""
    commands = [
        ["manage.py", "check"],
        ["-m", "daphne", "-p", "0", "webapp.asgi:application"],
        ["-m", "workers.ingestor"],
        ["-m", "celery", "-A", "workers.celery_app", "worker", "--pool", "solo"],
        ["-m", "celery", "-A", "workers.celery_app", "beat"],
    ]
    for bad in ("", "  ", "team a", "team:a", "a" * 41, "ünïcode"):
        env = {**os.environ, "RFT_REDIS_PREFIX": bad, "RFT_VAR_DIR": str(tmp_path)}
        for args in commands if bad == "team a" else commands[:1]:
            assert _start_up_lines(args, env) == [
                f"RFT Studio settings: RFT_REDIS_PREFIX={bad!r} is not a valid Redis key prefix: "
                "it must be 1-40 characters of letters, digits, '.', '_' or '-'"
            ], args


def test_a_fresh_var_dir_gets_a_random_prefix_once_and_a_spoiled_one_is_named(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RFT_REDIS_PREFIX"}
    env["RFT_VAR_DIR"] = str(tmp_path)
    show = ["-c", "import django; django.setup(); from django.conf import settings; "
                  "print(settings.RFT_REDIS_PREFIX, settings.CHANNEL_LAYERS['default']['CONFIG']"
                  "['prefix'], settings.CELERY_BROKER_TRANSPORT_OPTIONS['global_keyprefix'])"]  # fmt: skip
    env["DJANGO_SETTINGS_MODULE"] = "webapp.settings"
    first = subprocess.run([sys.executable, *show], cwd=ROOT, env=env, capture_output=True,
                           text=True, check=True).stdout.split()  # fmt: skip
    prefix = (tmp_path / "redis_prefix").read_text().strip()
    assert re.fullmatch(r"[0-9a-f]{8}", prefix)
    assert first == [prefix, f"rft:{prefix}:asgi:", f"rft:{prefix}:"]
    again = subprocess.run([sys.executable, *show], cwd=ROOT, env=env, capture_output=True,
                           text=True, check=True).stdout.split()  # fmt: skip
    assert again == first  # written once, kept
    assert subprocess.run(
        [sys.executable, *show], cwd=ROOT, env={**env, "RFT_REDIS_PREFIX": "team-a"},
        capture_output=True, text=True, check=True,
    ).stdout.split()[0] == "team-a"  # fmt: skip
    (tmp_path / "redis_prefix").write_text("team a\n")
    assert _start_up_lines(["manage.py", "check"], env) == [
        f"RFT Studio settings: {tmp_path / 'redis_prefix'}='team a' is not a valid Redis key "
        "prefix: it must be 1-40 characters of letters, digits, '.', '_' or '-'"
    ]


def test_a_launched_runs_job_streams_under_the_deployment_prefix(settings):
    from types import SimpleNamespace

    from webapp.runs.actions import runtime_env_of

    settings.RFT_REDIS_PREFIX = "team-a"
    env_vars = runtime_env_of(SimpleNamespace(key="k1"))["env_vars"]
    assert (env_vars[ENV_REDIS_URL], env_vars[ENV_REDIS_PREFIX], env_vars[ENV_RUN_ID]) == (
        settings.REDIS_URL,
        "team-a",
        "k1",
    )
