"""The replay queue: the body of a ``queue`` buffer whose ``replay_buffer.enable`` is true.

Semantics reproduced from Trinity-RFT's ``AsyncPriorityQueue`` (``trinity/buffer/storage/
queue.py``, 0.6): an *item* is the list of experiences of one ``put`` (one explorer step here,
as in Trinity, whose pipeline writes a step at once). Its priority comes from the priority
function, computed when the item enters the queue:

- ``linear_decay`` (``decay`` 2.0): ``model_version - decay * use_count``; always (re)inserted;
- ``decay_limit_randomization`` (``decay`` 2.0, ``use_count_limit`` 3, ``sigma`` 0.0): the same
  plus Gaussian noise of std ``sigma``; (re)inserted only while ``use_count < use_count_limit``
  (any count when the limit is 0 or less).

``get`` takes whole items, highest priority first (among equal priorities, the one inserted
first), until it holds ``n`` experiences; what is left over of the last item waits for the next
``get`` (Trinity's experience pool). A taken item's ``use_count`` goes up by one, and, when
``reuse_cooldown_time`` is set, it is offered again (with its new priority) that many seconds
later; ``None`` means never reused. ``capacity`` counts items: a new item arriving at a full
queue evicts the lowest-priority one (the oldest of those) when its own priority is at least
as high, else it is dropped. ``close`` (end of data) stops reuse; what is queued drains.

``model_version`` is the experiences' (the explorer stamps it); ``clock`` is injectable so
tests can step time by hand.
"""

from __future__ import annotations

import bisect
import itertools
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from rft_core.errors import ConfigError
from rft_core.experience import Experience

PRIORITY_FNS = ("linear_decay", "decay_limit_randomization")
_DEFAULTS = {
    "linear_decay": {"decay": 2.0},
    "decay_limit_randomization": {"decay": 2.0, "use_count_limit": 3, "sigma": 0.0},
}
_PATH = "buffer.trainer_input.experience_buffer.replay_buffer"


class PriorityFn:
    """``(priority, put_into_queue)`` of an item from its model version and use count."""

    def __init__(self, name: str, args: dict[str, Any] | None = None, seed: int = 0):
        if name not in _DEFAULTS:
            raise ConfigError(
                f"{_PATH}.priority_fn", f"{name!r} is not one of {', '.join(PRIORITY_FNS)}"
            )
        settings = dict(_DEFAULTS[name])
        unknown = sorted(set(args or {}) - set(settings))
        if unknown:
            raise ConfigError(
                f"{_PATH}.priority_fn_args",
                f"{name} takes {', '.join(settings)}; not {', '.join(unknown)}",
            )
        settings.update(args or {})
        self.name = name
        self.decay = float(settings["decay"])
        self.use_count_limit = int(settings.get("use_count_limit", 0))
        self.sigma = float(settings.get("sigma", 0.0))
        self._rng = random.Random(seed)

    def __call__(self, model_version: int, use_count: int) -> tuple[float, bool]:
        priority = float(model_version - self.decay * use_count)
        if self.name == "linear_decay":
            return priority, True
        if self.sigma > 0:
            priority += self._rng.gauss(0.0, self.sigma)
        keep = use_count < self.use_count_limit if self.use_count_limit > 0 else True
        return priority, keep


class _Item:
    __slots__ = ("experiences", "use_count", "order")

    def __init__(self, experiences: list[Experience], order: int):
        self.experiences = experiences
        self.use_count = 0
        self.order = order


class ReplayQueue:
    """Same interface as ``rft_core.buffer.queue.LocalQueue`` (put / get / close / qsize)."""

    def __init__(
        self,
        *,
        capacity: int = 10000,
        reuse_cooldown_time: float | None = None,
        priority_fn: str = "linear_decay",
        priority_fn_args: dict[str, Any] | None = None,
        mirror: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.capacity = max(1, int(capacity))
        self.reuse_cooldown_time = reuse_cooldown_time
        self.priority_fn = PriorityFn(priority_fn, priority_fn_args)
        self._mirror = mirror
        self._clock = clock
        self._cond = threading.Condition()
        self._queued: list[tuple[float, int, _Item]] = []  # sorted by (priority, insertion)
        self._cooling: list[tuple[float, _Item]] = []  # (time it comes back, item)
        self._pool: deque[Experience] = deque()  # taken, not yet handed out
        self._order = itertools.count()
        self._closed = False
        self.total_put = 0
        self.dropped = 0  # items refused at a full queue or by the priority function

    # -- writer -------------------------------------------------------------------------------

    def put(self, experiences: list[Experience]) -> None:
        if not experiences:
            return
        if self._mirror is not None:
            self._mirror.put(experiences)
        with self._cond:
            self._insert(_Item(list(experiences), next(self._order)))
            self.total_put += len(experiences)
            self._closed = False
            self._cond.notify_all()

    def close(self) -> None:
        if self._mirror is not None:
            self._mirror.close()
        with self._cond:
            self._closed = True
            self._cooling.clear()  # Trinity: no reuse once the writer is done
            self._cond.notify_all()

    # -- reader -------------------------------------------------------------------------------

    def get(self, n: int, timeout: float | None = None) -> tuple[list[Experience], str]:
        """Return (experiences, "ok" | "closed" | "timeout"), as ``LocalQueue.get``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._release_cooled()
                while len(self._pool) < n and self._queued:
                    self._take_best()
                if len(self._pool) >= n or (self._closed and not self._cooling):
                    taken = [self._pool.popleft() for _ in range(min(n, len(self._pool)))]
                    return taken, ("ok" if len(taken) == n else "closed")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return [], "timeout"
                wait = self._next_cooled_in()
                if left is not None:
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)

    def qsize(self) -> int:
        with self._cond:
            self._release_cooled()
            return len(self._pool) + sum(len(i.experiences) for _, _, i in self._queued)

    def order(self) -> list[tuple[float, int]]:
        """``(priority, first model_version)`` of the queued items, best first (tests, logs)."""
        with self._cond:
            self._release_cooled()
            return [(p, i.experiences[0].model_version) for p, _, i in reversed(self._queued)]

    def ping(self) -> bool:
        return True

    # -- inside the lock ----------------------------------------------------------------------

    def _insert(self, item: _Item) -> None:
        version = int(item.experiences[0].model_version)
        priority, keep = self.priority_fn(version, item.use_count)
        if not keep:
            self.dropped += 1
            return
        if len(self._queued) >= self.capacity:
            lowest = self._queued[0][0]
            if lowest > priority:
                self.dropped += 1
                return
            # evict the lowest priority's oldest: the last of the run of lowest priorities
            oldest = max(i for i, entry in enumerate(self._queued) if entry[0] == lowest)
            self._queued.pop(oldest)
            self.dropped += 1
        # among equal priorities the earlier insertion is taken first: key (priority, -order)
        bisect.insort(self._queued, (priority, -item.order, item), key=lambda t: t[:2])

    def _take_best(self) -> None:
        _, _, item = self._queued.pop()
        self._pool.extend(item.experiences)
        item.use_count += 1
        if self.reuse_cooldown_time is not None and not self._closed:
            self._cooling.append((self._clock() + self.reuse_cooldown_time, item))

    def _release_cooled(self) -> None:
        now = self._clock()
        ready = [entry for entry in self._cooling if entry[0] <= now]
        if ready:
            self._cooling = [entry for entry in self._cooling if entry[0] > now]
            for _, item in sorted(ready, key=lambda e: (e[0], e[1].order)):
                item.order = next(self._order)  # back at the end of its priority's line
                self._insert(item)

    def _next_cooled_in(self) -> float | None:
        if not self._cooling:
            return None
        return max(0.0, min(t for t, _ in self._cooling) - self._clock())
