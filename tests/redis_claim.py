"""A Redis database index of the test Redis that no other test stack holds: for tests whose
Celery broker or ingestor must meet nobody else's workers or run streams on a shared Redis.

The claim is a key with a TTL (a crashed session's claim runs out); ``release`` drops it."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

CLAIM_KEY = "rft:e2e:stack"  # the e2e stack's claims (tests/e2e/conftest.py) use the same key


def claim_db(redis_url: str, owner: str) -> str:
    """REDIS_URL on a free database index (15 down to 1) without run streams, claimed."""
    import redis

    parts = urlsplit(redis_url)
    for index in range(15, 0, -1):
        url = urlunsplit(parts._replace(path=f"/{index}"))
        client = redis.Redis.from_url(url)
        try:
            if not client.set(CLAIM_KEY, owner, nx=True, ex=3600):
                continue
            if next(client.scan_iter(match="rft:*:run:*", count=1000), None) is None:
                return url
            client.delete(CLAIM_KEY)
        finally:
            client.close()
    raise RuntimeError(f"no free database index on the Redis of {redis_url}")


def release(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.delete(CLAIM_KEY)
    finally:
        client.close()
