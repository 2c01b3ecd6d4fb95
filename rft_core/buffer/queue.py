"""The ``queue`` buffer: an in-memory FIFO from explorer to trainer, mirrored to ``path``.

When Ray is initialised the FIFO lives in a small named Ray actor (threaded, ``num_cpus=0``),
named from the job dir and the buffer name, so the explorer and trainer actors of one job find
the same queue with ``get_if_exists``. Create it from the driver first (the launcher does): a
non-detached actor lives as long as the process that created it. Without Ray it is an
in-process queue (single-process runs and tests), and so is a queue that an in-process
explorer and trainer share (``in_process``, e.g. ``mode: colocate`` inside one Ray actor).

Everything that passes through is also written to the mirror named by ``path``
(``sqlite:///x.db`` → an ``sql`` table, ``*.jsonl`` → a ``file`` buffer), from inside the queue
so that several writers never race on the mirror.

With ``replay`` settings (``replay_buffer.enable``; :func:`replay_settings`) the body is a
``rft_core.buffer.replay.ReplayQueue`` instead of the FIFO: batches by priority, reused after
a cooldown, as Trinity-RFT's priority queue.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from rft_core.actors.actor_log import log_to_file
from rft_core.buffer.base import BUFFERS, ExperienceBuffer, mirror_storage_type
from rft_core.buffer.replay import ReplayQueue
from rft_core.experience import Experience

QUEUE_ACTOR_THREADS = 32


class LocalQueue:
    """A thread-safe FIFO with end-of-data; the body of both the in-process and the Ray queue."""

    def __init__(self, mirror: ExperienceBuffer | None = None):
        self._items: deque[Experience] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._mirror = mirror
        self.total_put = 0

    def put(self, experiences: list[Experience]) -> None:
        if self._mirror is not None:
            self._mirror.put(experiences)
        with self._cond:
            self._items.extend(experiences)
            self.total_put += len(experiences)
            self._closed = False  # a put after close (resumed writer) reopens the stream
            self._cond.notify_all()

    def get(self, n: int, timeout: float | None = None) -> tuple[list[Experience], str]:
        """Return (items, "ok" | "closed" | "timeout")."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while len(self._items) < n and not self._closed:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return [], "timeout"
                self._cond.wait(left)
            taken = [self._items.popleft() for _ in range(min(n, len(self._items)))]
            return taken, ("ok" if len(taken) == n else "closed")

    def close(self) -> None:
        if self._mirror is not None:
            self._mirror.close()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def qsize(self) -> int:
        with self._cond:
            return len(self._items)

    def ping(self) -> bool:
        return True


def actor_name(name: str, job_dir: Path) -> str:
    digest = hashlib.sha1(str(Path(job_dir).resolve()).encode()).hexdigest()[:12]
    return f"rft-queue-{digest}-{name}"


def _build_mirror(path: str | None, job_dir: Path, name: str) -> ExperienceBuffer | None:
    if not path:
        return None
    build = BUFFERS.get(mirror_storage_type(path))
    return build(name=name, path=path, job_dir=job_dir, role="writer")


def replay_settings(eb: Any) -> dict[str, Any] | None:
    """The ``ReplayQueue`` keyword arguments of an experience_buffer config, or None when its
    ``replay_buffer`` is off (a plain FIFO)."""
    rb = getattr(eb, "replay_buffer", None)
    if rb is None or not rb.enable:
        return None
    return {
        "capacity": int(getattr(eb, "capacity", 10000)),
        "reuse_cooldown_time": rb.reuse_cooldown_time,
        "priority_fn": rb.priority_fn,
        "priority_fn_args": dict(rb.priority_fn_args or {}),
    }


def _body(mirror: ExperienceBuffer | None, replay: dict[str, Any] | None) -> Any:
    if replay is None:
        return LocalQueue(mirror)

    return ReplayQueue(mirror=mirror, **replay)


class _MirroredQueue:
    """The queue as a Ray actor body: it opens its own mirror where it runs."""

    def __init__(
        self, path: str | None, job_dir: str, name: str, replay: dict[str, Any] | None = None
    ):
        log_to_file(Path(job_dir) / "log" / f"queue_{name}.log")
        self._body = _body(_build_mirror(path, Path(job_dir), name), replay)

    def put(self, experiences: list[Experience]) -> None:
        self._body.put(experiences)

    def get(self, n: int, timeout: float | None = None) -> tuple[list[Experience], str]:
        return self._body.get(n, timeout)

    def close(self) -> None:
        self._body.close()

    def qsize(self) -> int:
        return self._body.qsize()

    def ping(self) -> bool:
        return True


def _ray_initialized() -> bool:
    ray = sys.modules.get("ray")  # never imported: no Ray in this process
    return ray is not None and ray.is_initialized()


class QueueBuffer(ExperienceBuffer):
    """``in_process``: the writer and the reader share this object in one process (an
    explorer and a trainer driven together), so the FIFO stays here even inside a Ray actor."""

    def __init__(
        self,
        *,
        name: str,
        path: str | None,
        job_dir: Path,
        role: str = "writer",
        in_process: bool = False,
        replay: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.path = path
        self.role = role
        self._consumed = 0
        if not in_process and _ray_initialized():
            # no Ray in the in-process run (GPU machine)
            import ray

            actor_cls = ray.remote(num_cpus=0, max_concurrency=QUEUE_ACTOR_THREADS)(_MirroredQueue)
            self._actor = actor_cls.options(
                name=actor_name(name, job_dir), get_if_exists=True
            ).remote(path, str(job_dir), name, replay)
            self._local = None
        else:
            self._actor = None
            self._local = _body(_build_mirror(path, Path(job_dir), name), replay)

    @property
    def is_remote(self) -> bool:
        return self._actor is not None

    def _call(self, method: str, *args: Any) -> Any:
        if self._local is not None:
            return getattr(self._local, method)(*args)

        # no Ray in the in-process run (GPU machine)
        import ray

        return ray.get(getattr(self._actor, method).remote(*args))

    def put(self, experiences: list[Experience]) -> None:
        if experiences:
            self._call("put", list(experiences))

    def get(self, n: int, timeout: float | None = None) -> list[Experience]:
        items, status = self._call("get", n, timeout)
        if status == "timeout":
            raise self.timeout_error(n, self.qsize(), timeout or 0.0)
        self._consumed += len(items)
        return items

    def close(self) -> None:
        self._call("close")

    def qsize(self) -> int:
        return self._call("qsize")

    def state(self) -> dict[str, Any]:
        # the queue itself is in memory: after a restart the mirror holds the history
        return {"consumed": self._consumed}

    def load_state(self, state: dict[str, Any]) -> None:
        self._consumed = int(state.get("consumed", 0))
