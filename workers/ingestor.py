"""The event ingestor: Redis run streams -> database rows -> Channels groups.

    python -m workers.ingestor [--consumer NAME] [--group NAME] [--block-ms 1000] [--only-runs K,..]

Runs discover themselves by adding their id to the set ``rft:<prefix>:runs`` (see
``rft_core/monitor/events.py``); each stream ``rft:<prefix>:run:<key>`` is read through a
consumer group (``ingestor``), so several ingestors share the work and an entry is handled by
one. ``<prefix>`` is the deployment's (``settings.RFT_REDIS_PREFIX``): an ingestor never sees
the streams of another deployment on the same Redis, whatever its database number.

One batch of a stream (up to ``BATCH`` entries) is stored in ONE transaction by the web side's
public function for it, ``webapp.ingest.actions.record_events`` (each new entry a ``RunEvent``
with the next dense ``seq`` of its key, in stream order, projected into metric points, log
lines, samples, checkpoints and run status; an entry already stored, recognised by its stream
id, writes nothing again). After the commit the batch's new events go as ONE ``{"type":
"events", "first_seq", "last_seq", "events"}`` message to the group ``run-<run pk>``
(``webapp.ingest.actions.publish_events``), and then the entries are acknowledged: a crash
before the ack leaves them pending, and the next
delivery finds them stored. Sharing the load: ingestors of one group share the STREAMS. Each stream is read by one
ingestor at a time, the holder of its lease (``rft:<prefix>:ingest-lease:<group>:<key>``, ``SET NX``
with a ``LEASE_MS`` expiry renewed every poll), so that a run's batches are stored in stream
order and its seqs follow the stream (two consumers reading one stream would commit their
batches in either order). When a holder dies its lease expires and another ingestor takes
the stream over: it first claims every entry still pending in the group (the dead one's
unacked batch), then reads on. A restarted ingestor with the same ``--consumer`` name keeps
its leases and takes its own pending entries back at once. A batch whose transaction fails
stays pending and is retried.

Trimming: after acking, the stream is cut with ``XTRIM MINID`` at the oldest entry that some
consumer group of the stream still needs: the smallest id pending in any group (delivered,
not acked, so maybe not stored) or, when a group has read less far, the first id after its
last-delivered id. Every entry below that id was acked by every group, and an entry is acked
only after its transaction committed, so nothing unstored is ever trimmed; MINID (unlike
XDEL of our own acked ids) also respects other groups reading the same stream (another
deployment, a test) and costs one command whatever the batch size.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import time

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
django.setup()

import redis  # noqa: E402
from channels.layers import get_channel_layer  # noqa: E402
from django.conf import settings  # noqa: E402

from rft_core.monitor.events import namespace, run_id_of, runs_set, stream_prefix  # noqa: E402
from webapp.ingest.actions import publish_events, record_events  # noqa: E402

GROUP = "ingestor"
TRIM_S = 1.0  # a busy stream is trimmed at most this often; an idle one at once
RETRY_S = 5.0  # a stream whose batch failed to store is retried after this
LEASE_MS = 10_000  # a stream's reader lease: a dead ingestor's streams move on after this
BATCH = 200
DISCOVER_EVERY_S = 2.0

log = logging.getLogger("workers.ingestor")


class Ingestor:
    def __init__(
        self,
        client: redis.Redis,
        consumer: str,
        *,
        group: str = GROUP,
        channel_layer=None,
        only_runs: set[str] | None = None,
        trim: bool = True,
        prefix: str | None = None,
    ):
        """``only_runs`` limits the ingestor to those run ids (a dedicated ingestor, or a test
        that must not touch other runs on a shared Redis); ``trim`` cuts each stream after its
        entries are stored (see the module docstring); ``prefix`` is the deployment prefix
        whose streams it reads (default ``settings.RFT_REDIS_PREFIX``)."""
        self.client = client
        self.prefix = prefix if prefix is not None else settings.RFT_REDIS_PREFIX
        self.stream_prefix = stream_prefix(self.prefix)
        self.trim = trim
        self.only_runs = only_runs
        self.consumer = consumer
        self.group = group
        self.channel_layer = channel_layer if channel_layer is not None else get_channel_layer()
        self.streams: set[str] = set()
        self._retry_at: dict[str, float] = {}
        self._trimmed_at: dict[str, float] = {}
        self._untrimmed: set[str] = (
            set()
        )  # streams with entries acked since their last trim  # a stream whose batch failed: not before then
        self._discovered_at = float("-inf")

    def discover(self) -> set[str]:
        """Stream keys of all known runs; creates the consumer group on each new one."""
        members = self.client.smembers(runs_set(self.prefix))
        keys = {f"{self.stream_prefix}{m.decode()}" for m in members}
        keys |= {
            k.decode()
            for k in self.client.scan_iter(match=f"{self.stream_prefix}*", _type="STREAM")
        }
        if self.only_runs is not None:
            keys = {k for k in keys if run_id_of(k, self.prefix) in self.only_runs}
        for key in keys - self.streams:
            try:
                self.client.xgroup_create(key, self.group, id="0", mkstream=True)
            except redis.ResponseError as err:
                if "BUSYGROUP" not in str(err):
                    raise
            self.streams.add(key)
        return self.streams

    def poll(self, block_ms: int = 1000) -> int:
        """One round: claim stale pending entries, read new ones, store, fan out, ack.
        Returns the number of entries handled."""
        # New runs are looked for at most every DISCOVER_EVERY_S: SCAN walks the whole keyspace.
        if time.monotonic() - self._discovered_at >= DISCOVER_EVERY_S:
            self.discover()
            self._discovered_at = time.monotonic()
        if not self.streams:
            time.sleep(block_ms / 1000)
            return 0
        handled = 0
        leased = [key for key in sorted(self.streams) if self._lease(key)]
        if not leased:
            time.sleep(block_ms / 1000)
            return 0
        now = time.monotonic()
        leased = [key for key in leased if self._retry_at.get(key, 0.0) <= now]
        try:
            for key in leased:
                # the stream is ours: whatever is pending in the group (a dead holder's batch,
                # our own failed one) comes first, in stream order
                _, claimed, _ = self.client.xautoclaim(
                    key, self.group, self.consumer, 0, "0-0", count=BATCH
                )
                handled += self._handle(key, [c for c in claimed if c[1]])
            if handled:
                return handled  # pending entries first; new ones on the next round
            response = self.client.xreadgroup(
                self.group,
                self.consumer,
                {key: ">" for key in leased},
                count=BATCH,
                block=block_ms,
            )
        except redis.ResponseError as err:
            if "UNBLOCKED" not in str(err) and "NOGROUP" not in str(err):
                raise
            # a stream was deleted (retention, a finished test) while we read it: forget the
            # streams that are gone and look again, instead of ending the process
            gone = {key for key in self.streams if not self.client.exists(key)}
            log.info("run streams deleted meanwhile: %s", ", ".join(sorted(gone)) or err)
            self.streams -= gone
            self._discovered_at = float("-inf")
            return handled
        for key, entries in response or []:
            handled += self._handle(key.decode() if isinstance(key, bytes) else key, entries)
        if not handled:  # idle: trim what the last batches left
            for key in sorted(self._untrimmed):
                self._trim(key)
        return handled

    def _trim(self, key: str) -> None:
        trim_stored(self.client, key)
        self._trimmed_at[key] = time.monotonic()
        self._untrimmed.discard(key)

    def lease_key(self, key: str) -> str:
        """The key of the lease on reading stream ``key`` in this ingestor's group."""
        return f"{namespace(self.prefix)}ingest-lease:{self.group}:{run_id_of(key, self.prefix)}"

    def _lease(self, key: str) -> bool:
        """Take or renew this ingestor's lease on reading ``key``; False while another has it."""
        lease = self.lease_key(key)
        if self.client.set(lease, self.consumer, nx=True, px=LEASE_MS):
            return True
        if _text(self.client.get(lease) or b"") == self.consumer:
            self.client.pexpire(lease, LEASE_MS)
            return True
        return False

    def release(self) -> None:
        """Give up this ingestor's leases (a clean stop: the others take over at once)."""
        for key in self.streams:
            lease = self.lease_key(key)
            if _text(self.client.get(lease) or b"") == self.consumer:
                self.client.delete(lease)

    def recover_own_pending(self) -> int:
        """Entries delivered to this consumer name before a crash and never acked."""
        self.discover()
        handled = 0
        for key in sorted(self.streams):
            response = self.client.xreadgroup(self.group, self.consumer, {key: "0"}, count=10_000)
            for _, entries in response or []:
                handled += self._handle(key, entries)
        return handled

    def _handle(self, key: str, entries: list) -> int:
        if not entries:
            return 0
        run_key = run_id_of(key, self.prefix)
        try:
            run, new_rows = record_events(run_key, entries)
        except Exception:  # noqa: BLE001 - one run's bad batch must not stop the others
            # not acked: the entries stay pending and are claimed again in RETRY_S
            log.exception("storing %d entries of %s failed; they stay pending", len(entries), key)
            self._retry_at[key] = time.monotonic() + RETRY_S
            return 0
        if run is not None and new_rows:
            publish_events(run, new_rows, self.channel_layer)
        ids = [e[0] for e in entries]
        self.client.xack(key, self.group, *ids)
        if self.trim:
            self._untrimmed.add(key)
            if time.monotonic() - self._trimmed_at.get(key, float("-inf")) >= TRIM_S:
                self._trim(key)
        return len(entries)


def _next_id(stream_id: str) -> str:
    ms, _, n = stream_id.partition("-")
    return f"{ms}-{int(n or 0) + 1}"


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def trim_floor(client: redis.Redis, key: str) -> str | None:
    """The oldest stream id some consumer group of ``key`` still needs (pending in it, or not
    delivered to it yet); None when the stream has no group (nothing is known to be stored)."""
    groups = client.xinfo_groups(key)
    if not groups:
        return None
    floors = []
    for group in groups:
        name = _text(group["name"])
        if group["pending"]:
            smallest = client.xpending(key, name)["min"]
            if smallest is not None:  # None: acked meanwhile
                floors.append(_text(smallest))
        floors.append(_next_id(_text(group["last-delivered-id"])))
    return min(floors, key=lambda sid: tuple(int(p) for p in sid.split("-")))


def trim_stored(client: redis.Redis, key: str) -> int:
    """``XTRIM MINID`` at :func:`trim_floor`: drops the entries every group has acked (so
    stored). Returns the number of entries removed."""
    try:
        floor = trim_floor(client, key)
        if floor is None:
            return 0
        return client.xtrim(key, minid=floor, approximate=False)
    except (redis.ResponseError, ValueError) as err:  # a stream deleted meanwhile, odd ids
        log.info("not trimming %s: %s", key, err)
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workers.ingestor", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--consumer", default=f"{socket.gethostname()}-{os.getpid()}")
    parser.add_argument(
        "--group",
        default=os.environ.get("RFT_INGESTOR_GROUP", GROUP),
        help="consumer group of the deployment's run streams (ingestors of one group share them)",
    )
    parser.add_argument("--block-ms", type=int, default=1000)
    parser.add_argument(
        "--batch-ms",
        type=int,
        default=50,
        help="least time between two busy rounds (a busy stream's events wait up to this long)",
    )
    parser.add_argument(
        "--only-runs",
        default=os.environ.get("RFT_INGESTOR_ONLY_RUNS", ""),
        help="comma-separated run keys: consume only their streams (a dedicated ingestor, a test)",
    )
    args = parser.parse_args(argv)
    only_runs = {k for k in args.only_runs.split(",") if k} or None
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s ingestor: %(message)s"
    )

    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=10)
    try:
        client.ping()
    except redis.RedisError as err:
        print(
            f"ingestor: Redis at REDIS_URL={settings.REDIS_URL} is unreachable ({err}); "
            "start Redis (`make demo` starts one) or set REDIS_URL",
            file=sys.stderr,
        )
        return 2
    stopping = False

    def stop(signum, frame) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    ingestor = Ingestor(client, args.consumer, group=args.group, only_runs=only_runs)
    recovered = ingestor.recover_own_pending()
    log.info(
        "consuming run streams %s* as %s/%s (recovered %d)",
        ingestor.stream_prefix,
        args.group,
        args.consumer,
        recovered,
    )
    while not stopping:
        try:
            started = time.monotonic()
            if ingestor.poll(args.block_ms):
                # pace busy rounds: a stream at 1,000 events/s goes out as ~20 batches/s of
                # ~50 rather than hundreds of tiny ones (a transaction and a message each)
                time.sleep(max(0.0, args.batch_ms / 1000 - (time.monotonic() - started)))
        except redis.ConnectionError as err:
            log.warning("Redis connection lost (%s); retrying in 2 s", err)
            time.sleep(2)
    ingestor.release()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
