"""Experience buffers between explorer and trainer: ``queue`` (mirrored to ``path``), ``file``
(JSONL) and ``sql`` (SQLite). ``build_buffer`` is the one entry point; the semantics shared by
all three are in ``rft_core.buffer.base``."""

from __future__ import annotations

from pathlib import Path

from rft_core.buffer.base import (
    BufferTimeout,
    ExperienceBuffer,
    is_sqlite_path,
    resolve_buffer_path,
)
from rft_core.buffer.experience import Experience
from rft_core.errors import ConfigError

STORAGE_TYPES = ("queue", "file", "sql")
_CONFIG_PATH = "buffer.trainer_input.experience_buffer"
QUEUE_BETWEEN_JOBS_NEEDS_PATH = (
    "a queue without a path cannot reach another job: the explore job and the train job "
    "share experiences through the queue's path (e.g. sqlite:///experiences.db, the same in "
    "both YAMLs), or use storage_type sql / file"
)


def build_buffer(
    storage_type: str,
    *,
    name: str,
    path: str | None,
    job_dir: Path,
    role: str = "writer",
    between_jobs: bool = False,
) -> ExperienceBuffer:
    """Open the experience buffer ``name`` of ``storage_type`` for a ``role`` ("writer" or
    "reader"). Relative paths resolve under ``<job_dir>/buffer/``.

    ``between_jobs``: writer and reader are separate ``trinity run`` jobs (``mode: explore`` and
    ``mode: train``). An in-memory queue cannot reach the other job, so a ``queue`` is opened
    as its ``path`` mirror (``sqlite:///x.db`` → ``sql``, else ``file``), which both jobs see:
    Trinity's async example pair, both sides ``storage_type: queue`` with one sqlite path."""
    kind = (storage_type or "queue").lower()
    if role not in ("writer", "reader"):
        raise ValueError(f"role must be 'writer' or 'reader', not {role!r}")
    if kind == "queue" and between_jobs:
        if not path:
            raise ConfigError(f"{_CONFIG_PATH}.path", QUEUE_BETWEEN_JOBS_NEEDS_PATH)
        kind = "sql" if is_sqlite_path(path) else "file"
    if kind == "queue":
        from rft_core.buffer.queue import QueueBuffer

        return QueueBuffer(name=name, path=path, job_dir=Path(job_dir), role=role)
    if kind not in STORAGE_TYPES:
        raise ConfigError(
            f"{_CONFIG_PATH}.storage_type",
            f"unknown storage_type {storage_type!r}; choose one of {', '.join(STORAGE_TYPES)}",
            value=storage_type,
            allowed=list(STORAGE_TYPES),
        )
    if not path:
        raise ConfigError(
            f"{_CONFIG_PATH}.path",
            f"storage_type {kind} needs a path (e.g. "
            f"{'sqlite:///experiences.db' if kind == 'sql' else 'experiences.jsonl'})",
        )
    target = resolve_buffer_path(path, Path(job_dir))
    if kind == "file":
        from rft_core.buffer.file import FileBuffer

        return FileBuffer(target, name=name, role=role)
    from rft_core.buffer.sql import SQLBuffer

    return SQLBuffer(target, name=name, role=role)


__all__ = [
    "QUEUE_BETWEEN_JOBS_NEEDS_PATH",
    "STORAGE_TYPES",
    "BufferTimeout",
    "Experience",
    "ExperienceBuffer",
    "build_buffer",
    "resolve_buffer_path",
]
