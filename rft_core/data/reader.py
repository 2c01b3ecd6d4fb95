"""Reading a taskset batch by batch, over epochs, resumably.

The reader sees the taskset as an endless stream ``epoch 0 ++ epoch 1 ++ ...`` (each epoch in
file order, or in a permutation drawn from ``seed`` and the epoch number when shuffling) and
keeps one number: ``index``, the tasks consumed so far. A batch takes the next ``batch_size``
tasks of the stream, across an epoch boundary if need be; the last batch may be short. The
reader stops after ``total_epochs`` epochs, or after ``total_steps`` batches when that is set
(``total_steps`` overrides epochs, as in Trinity). ``state()`` / ``load_state()`` carry
``index`` through a checkpoint, and ``start_index = step * batch_size`` resumes at a step.

With ``selector_type`` ``random`` or ``difficulty_based`` (``rft_core.data.selectors``) the
stream positions still count the tasks consumed, but each batch's rows are the selector's draw
at that position; ``feedback`` hands the selector each task's mean reward after a step.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from rft_core.data.selectors import build_selector
from rft_core.data.task import Task
from rft_core.data.taskset import Taskset


class TasksetReader:
    def __init__(
        self,
        taskset: Taskset,
        batch_size: int,
        total_epochs: int = 1,
        total_steps: int | None = None,
        start_index: int | None = None,
        *,
        shuffle: bool | None = None,
        seed: int | None = None,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.taskset = taskset
        self.batch_size = batch_size
        self.total_epochs = total_epochs
        self.total_steps = total_steps
        selector = getattr(taskset.cfg, "data_selector", None)
        self.shuffle = (
            shuffle if shuffle is not None else getattr(selector, "selector_type", "") == "shuffle"
        )
        self.seed = seed if seed is not None else getattr(selector, "seed", 42)
        self.index = taskset.cfg.index if start_index is None else start_index
        self.steps = self.index // batch_size
        self._order: tuple[int, np.ndarray] | None = None

        self.selector_type = getattr(selector, "selector_type", "sequential")
        self._selector = build_selector(taskset, selector) if selector is not None else None
        if self._selector is not None:
            self.seed = int(getattr(selector, "seed", 42))

    @property
    def epoch(self) -> int:
        return self.index // len(self.taskset)

    @property
    def end(self) -> int | None:
        """Stream position where reading stops (None: total_steps decides)."""
        return None if self.total_steps is not None else self.total_epochs * len(self.taskset)

    def next_batch(self) -> list[Task] | None:
        """The next batch, or None at the end of the data."""
        if self.total_steps is not None and self.steps >= self.total_steps:
            return None
        stop = self.index + self.batch_size
        if self.end is not None:
            stop = min(stop, self.end)
        if stop <= self.index:
            return None
        if self._selector is not None:
            rows = self._selector.select(self.index, stop - self.index)
        else:
            rows = [self._row_at(pos) for pos in range(self.index, stop)]
        batch = [self.taskset[row] for row in rows]
        self.index = stop
        self.steps += 1
        return batch

    def __iter__(self) -> Iterator[list[Task]]:
        while (batch := self.next_batch()) is not None:
            yield batch

    def feedback(self, rewards_by_task: dict[int, list[float]]) -> None:
        """Each task's rewards of the last step (task index -> rewards): the selector's
        pass rates, their means (``difficulty_based``; the others take none)."""
        if self._selector is None or not rewards_by_task:
            return
        indices = sorted(rewards_by_task)
        rates = [sum(rewards_by_task[i]) / len(rewards_by_task[i]) for i in indices]
        self._selector.feedback(indices, rates)

    def state(self) -> dict[str, Any]:
        """What a checkpoint stores to resume here (``explorer_meta.json``)."""
        n = len(self.taskset)
        extra = {}
        if self._selector is not None:
            extra = {"selector_type": self.selector_type, "selector": self._selector.state()}
        return {
            **extra,
            "taskset": self.taskset.name,
            "index": self.index,
            "epoch": self.index // n,
            "offset": self.index % n,
            "steps": self.steps,
            "shuffle": self.shuffle,
            "seed": self.seed,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from a ``state()``; a different shuffle or seed would replay other tasks."""
        if (
            state.get("shuffle", self.shuffle) != self.shuffle
            or state.get("seed", self.seed) != self.seed
        ):
            raise ValueError(
                f"taskset {self.taskset.name!r}: the saved reader state used shuffle={state.get('shuffle')} "
                f"seed={state.get('seed')}, the config now says shuffle={self.shuffle} seed={self.seed}"
            )
        self.index = int(state["index"])
        self.steps = int(state.get("steps", self.index // self.batch_size))
        if self._selector is not None and state.get("selector_type") == self.selector_type:
            self._selector.load_state(state.get("selector") or {})

    @classmethod
    def from_state(cls, taskset: Taskset, state: dict[str, Any], **kwargs: Any) -> TasksetReader:
        reader = cls(taskset, **kwargs)
        reader.load_state(state)
        return reader

    def _row_at(self, pos: int) -> int:
        n = len(self.taskset)
        epoch, offset = divmod(pos, n)
        if not self.shuffle:
            return offset
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, np.random.default_rng([self.seed, epoch]).permutation(n))
        return int(self._order[1][offset])
