"""The ``file`` buffer: experiences as JSON lines in one file.

The writer appends whole lines (one ``write`` per batch, flushed); readers parse only complete
lines, so a reader never sees half an experience. End of data is a sidecar ``<file>.closed``
(kept out of the data so the JSONL stays a plain dataset). The reader's offset is the byte
position after the last consumed line plus a count; ``state()`` returns both.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from rft_core.buffer.base import POLL_SECONDS, ExperienceBuffer
from rft_core.errors import DataError
from rft_core.experience import Experience


class FileBuffer(ExperienceBuffer):
    def __init__(self, path: Path, *, name: str = "experience_buffer", role: str = "writer"):
        self.name = name
        self.path = Path(path)
        self.closed_marker = self.path.with_name(self.path.name + ".closed")
        self.role = role
        self._lock = threading.Lock()
        self._consumed = 0
        self._byte_offset = 0  # end of the last consumed line
        self._scan_offset = 0  # end of the last parsed line
        self._pending: list[tuple[Experience, int]] = []  # (experience, byte end of its line)
        if role == "writer":
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.touch()
            self.closed_marker.unlink(missing_ok=True)  # a resumed writer reopens the stream

    # ---- writer ---------------------------------------------------------------------------
    def put(self, experiences: list[Experience]) -> None:
        if not experiences:
            return
        text = "".join(json.dumps(e.to_dict(), ensure_ascii=False) + "\n" for e in experiences)
        with self._lock, self.path.open("a", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()

    def close(self) -> None:
        self.closed_marker.touch()

    def drop_after(self, state: dict[str, Any]) -> int:
        """Remove the experiences written after the reader position ``state`` (a resumed mode
        both run's explorer makes them again); returns how many."""
        offset = int(state.get("byte_offset", 0))
        with self._lock:
            if not self.path.exists() or self.path.stat().st_size <= offset:
                return 0
            with self.path.open("rb") as fh:
                fh.seek(offset)
                dropped = sum(1 for line in fh if line.strip())
            os.truncate(self.path, offset)
        return dropped

    # ---- reader ---------------------------------------------------------------------------
    def _scan(self) -> None:
        """Parse complete lines written since the last scan into ``_pending``."""
        if not self.path.exists():
            return
        with self.path.open("rb") as fh:
            fh.seek(self._scan_offset)
            data = fh.read()
        lineno = self._consumed + len(self._pending)
        offset = self._scan_offset
        for raw in data.splitlines(keepends=True):
            if not raw.endswith(b"\n"):
                break  # a line still being written
            offset += len(raw)
            lineno += 1
            if not raw.strip():
                continue
            try:
                experience = Experience.from_dict(json.loads(raw))
            except (json.JSONDecodeError, TypeError) as err:
                raise DataError(
                    f"{self.path}: line {lineno} is not an experience JSON object ({err}); "
                    "remove the line or point trainer_input.experience_buffer.path elsewhere"
                ) from err
            self._pending.append((experience, offset))
        self._scan_offset = offset

    def get(self, n: int, timeout: float | None = None) -> list[Experience]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                closed = self.closed_marker.exists()  # checked BEFORE the scan: no lost tail
                self._scan()
                if len(self._pending) >= n or closed:
                    taken, self._pending = self._pending[:n], self._pending[n:]
                    if taken:
                        self._consumed += len(taken)
                        self._byte_offset = taken[-1][1]
                    return [experience for experience, _ in taken]
                have = len(self._pending)
            if deadline is not None and time.monotonic() >= deadline:
                raise self.timeout_error(n, have, timeout or 0.0)
            time.sleep(POLL_SECONDS)

    def qsize(self) -> int:
        with self._lock:
            self._scan()
            return len(self._pending)

    def state(self) -> dict[str, Any]:
        return {"consumed": self._consumed, "byte_offset": self._byte_offset}

    def load_state(self, state: dict[str, Any]) -> None:
        with self._lock:
            self._consumed = int(state.get("consumed", 0))
            self._byte_offset = self._scan_offset = int(state.get("byte_offset", 0))
            self._pending = []
