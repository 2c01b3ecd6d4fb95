"""The ``sql`` buffer: experiences as JSON rows in a SQLite table (stdlib ``sqlite3``).

One table per buffer name (``id INTEGER PRIMARY KEY`` gives the order), plus a small
``rft_buffer_meta`` table holding the end-of-data flag. WAL mode lets the explorer write while
the trainer reads. The reader's offset is the last consumed ``id``. SQLAlchemy would add a
dependency for three statements, so plain ``sqlite3`` it is.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from rft_core.buffer.base import POLL_SECONDS, ExperienceBuffer
from rft_core.errors import DataError
from rft_core.experience import Experience


def table_name(name: str) -> str:
    """A safe SQL identifier for a buffer name (``exp-buffer.v2`` → ``exp_buffer_v2``)."""
    clean = re.sub(r"\W", "_", name) or "experience_buffer"
    return clean if not clean[0].isdigit() else f"t_{clean}"


class SQLBuffer(ExperienceBuffer):
    def __init__(self, path: Path, *, name: str = "experience_buffer", role: str = "writer"):
        self.name = name
        self.path = Path(path)
        self.table = table_name(name)
        self.role = role
        self._lock = threading.Lock()
        self._last_id = 0
        self._consumed = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            with self._db:
                self._db.execute(
                    f'CREATE TABLE IF NOT EXISTS "{self.table}" (id INTEGER PRIMARY KEY '
                    "AUTOINCREMENT, data TEXT NOT NULL, model_version INTEGER, reward REAL, "
                    "created REAL)"
                )
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS rft_buffer_meta "
                    "(buffer TEXT PRIMARY KEY, closed INTEGER NOT NULL)"
                )
                if role == "writer":  # a (resumed) writer reopens the stream
                    self._set_closed(False)
        except sqlite3.DatabaseError as err:
            raise DataError(
                f"{self.path}: cannot use as a SQLite experience buffer ({err}); point "
                "trainer_input.experience_buffer.path at a new .db file"
            ) from err

    def _set_closed(self, closed: bool) -> None:
        self._db.execute(
            "INSERT INTO rft_buffer_meta (buffer, closed) VALUES (?, ?) "
            "ON CONFLICT(buffer) DO UPDATE SET closed = excluded.closed",
            (self.table, int(closed)),
        )

    def put(self, experiences: list[Experience]) -> None:
        if not experiences:
            return
        now = time.time()
        rows = [
            (json.dumps(e.to_dict(), ensure_ascii=False), e.model_version, e.reward, now)
            for e in experiences
        ]
        with self._lock, self._db:
            self._db.executemany(
                f'INSERT INTO "{self.table}" (data, model_version, reward, created) '
                "VALUES (?, ?, ?, ?)",
                rows,
            )

    def close(self) -> None:
        with self._lock, self._db:
            self._set_closed(True)

    def drop_after(self, state: dict[str, Any]) -> int:
        """Remove the experiences written after the reader position ``state`` (a resumed mode
        both run's explorer makes them again); returns how many."""
        last_id = int(state.get("last_id", 0))
        with self._lock, self._db:
            cursor = self._db.execute(f'DELETE FROM "{self.table}" WHERE id > ?', (last_id,))
        return cursor.rowcount

    def _closed(self) -> bool:
        row = self._db.execute(
            "SELECT closed FROM rft_buffer_meta WHERE buffer = ?", (self.table,)
        ).fetchone()
        return bool(row and row[0])

    def _available(self) -> int:
        return self._db.execute(
            f'SELECT COUNT(*) FROM "{self.table}" WHERE id > ?', (self._last_id,)
        ).fetchone()[0]

    def get(self, n: int, timeout: float | None = None) -> list[Experience]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                closed = self._closed()  # checked BEFORE counting: no lost tail
                have = self._available()
                if have >= n or closed:
                    rows = self._db.execute(
                        f'SELECT id, data FROM "{self.table}" WHERE id > ? ORDER BY id LIMIT ?',
                        (self._last_id, n),
                    ).fetchall()
                    if rows:
                        self._last_id = rows[-1][0]
                        self._consumed += len(rows)
                    return [Experience.from_dict(json.loads(data)) for _, data in rows]
            if deadline is not None and time.monotonic() >= deadline:
                raise self.timeout_error(n, have, timeout or 0.0)
            time.sleep(POLL_SECONDS)

    def qsize(self) -> int:
        with self._lock:
            return self._available()

    def total(self) -> int:
        """Rows ever written (consumed or not)."""
        with self._lock:
            return self._db.execute(f'SELECT COUNT(*) FROM "{self.table}"').fetchone()[0]

    def state(self) -> dict[str, Any]:
        return {"consumed": self._consumed, "last_id": self._last_id}

    def load_state(self, state: dict[str, Any]) -> None:
        self._consumed = int(state.get("consumed", 0))
        self._last_id = int(state.get("last_id", 0))

    def shutdown(self) -> None:
        """Close the database connection (not the stream: see ``close``)."""
        self._db.close()
