"""What every experience buffer offers, and where a buffer's ``path`` lands on disk.

Semantics shared by ``queue``, ``file`` and ``sql``: a writer ``put``s lists of Experiences and
finally ``close``s (end of data); a reader ``get(n)`` blocks until ``n`` are available, or
returns what remains once the writer closed (an empty list = nothing more will come), or raises
``BufferTimeout`` after ``timeout`` seconds. Readers keep a consumed offset; ``state()`` /
``load_state()`` let a resumed trainer continue where its checkpoint left off.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rft_core.errors import RFTError
from rft_core.experience import Experience
from rft_core.registry import Registry

POLL_SECONDS = 0.05


class BufferTimeout(RFTError):
    """``get`` waited ``timeout`` seconds without enough experiences and without end of data."""


class ExperienceBuffer(ABC):
    name: str

    @abstractmethod
    def put(self, experiences: list[Experience]) -> None: ...

    @abstractmethod
    def get(self, n: int, timeout: float | None = None) -> list[Experience]: ...

    @abstractmethod
    def close(self) -> None:
        """Writer side: signal end of data; blocked readers return what remains."""

    @abstractmethod
    def qsize(self) -> int:
        """Experiences available to this reader now."""

    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        return None

    def shutdown(self) -> None:
        """Release this handle's resources (not the stream: see ``close``)."""
        return None

    def __len__(self) -> int:
        return self.qsize()

    def timeout_error(self, n: int, have: int, timeout: float) -> BufferTimeout:
        return BufferTimeout(
            f"buffer {self.name!r}: waited {timeout:g}s for {n} experiences, {have} available "
            "and the writer has not finished; is the explorer running? (raise "
            "synchronizer.sync_timeout or explorer.max_timeout if it is just slow)"
        )


def strip_sqlite_scheme(path: str) -> str:
    """``sqlite:///x.db`` → ``x.db``; ``sqlite:////abs/x.db`` → ``/abs/x.db``; others unchanged."""
    return path[len("sqlite:///") :] if path.startswith("sqlite:///") else path


def resolve_buffer_path(path: str, job_dir: Path) -> Path:
    """Where a buffer's ``path`` lives. Trinity hands ``sqlite:///gsm8k.db`` to SQLAlchemy, so a
    relative path lands in whatever directory the Ray worker happens to run in; we put relative
    paths under ``<job_dir>/buffer/`` (next to the run they belong to) and keep absolute ones."""
    plain = Path(strip_sqlite_scheme(path)).expanduser()
    return plain if plain.is_absolute() else Path(job_dir) / "buffer" / plain


def is_sqlite_path(path: str) -> bool:
    return path.startswith("sqlite:") or Path(path).suffix in (".db", ".sqlite", ".sqlite3")


def mirror_storage_type(path: str) -> str:
    """The ``storage_type`` that holds a queue's ``path`` mirror: ``sql`` for a SQLite path,
    else ``file``."""
    return "sql" if is_sqlite_path(path) else "file"


BufferFactory = Callable[..., ExperienceBuffer]
# the storage types, registered in rft_core.buffer (the package the kinds are imported by);
# here so that a kind that builds another (the queue's mirror) reaches it without a cycle
# in the order the config's choices list them (the default first)
BUFFERS: Registry[BufferFactory] = Registry(
    "storage_type", "buffer.trainer_input.experience_buffer.storage_type", sort_names=False
)
