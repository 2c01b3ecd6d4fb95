"""Experience buffers between explorer and trainer: ``queue`` (mirrored to ``path``), ``file``
(JSONL) and ``sql`` (SQLite), each a factory in the ``BUFFERS`` registry (selected by
``storage_type``; the config's choices come from it), so a new kind is one decorated function
here. ``build_buffer`` is the one entry point; the semantics shared by all kinds are in
``rft_core.buffer.base``."""

from __future__ import annotations

from pathlib import Path

from rft_core.buffer.base import (
    BUFFERS,
    BufferTimeout,
    ExperienceBuffer,
    mirror_storage_type,
    resolve_buffer_path,
)
from rft_core.buffer.file import FileBuffer
from rft_core.buffer.queue import QueueBuffer
from rft_core.buffer.sql import SQLBuffer
from rft_core.config.buffer_checks import QUEUE_BETWEEN_JOBS_NEEDS_PATH
from rft_core.errors import ConfigError

_CONFIG_PATH = "buffer.trainer_input.experience_buffer"


@BUFFERS.register("queue")
def _queue(
    *, name: str, path: str | None, job_dir: Path, role: str, replay: dict | None = None
) -> ExperienceBuffer:
    return QueueBuffer(name=name, path=path, job_dir=job_dir, role=role, replay=replay)


@BUFFERS.register("file")
def _file(*, name: str, path: str | None, job_dir: Path, role: str) -> ExperienceBuffer:
    return FileBuffer(_target("file", path, job_dir, "experiences.jsonl"), name=name, role=role)


@BUFFERS.register("sql")
def _sql(*, name: str, path: str | None, job_dir: Path, role: str) -> ExperienceBuffer:
    target = _target("sql", path, job_dir, "sqlite:///experiences.db")
    return SQLBuffer(target, name=name, role=role)


def _target(kind: str, path: str | None, job_dir: Path, example: str) -> Path:
    if not path:
        raise ConfigError(
            f"{_CONFIG_PATH}.path", f"storage_type {kind} needs a path (e.g. {example})"
        )
    return resolve_buffer_path(path, job_dir)


def build_buffer(
    storage_type: str,
    *,
    name: str,
    path: str | None,
    job_dir: Path,
    role: str = "writer",
    between_jobs: bool = False,
    replay: dict | None = None,
) -> ExperienceBuffer:
    """Open the experience buffer ``name`` of ``storage_type`` (a ``BUFFERS`` entry) for a
    ``role`` ("writer" or "reader"). Relative paths resolve under ``<job_dir>/buffer/``.

    ``between_jobs``: writer and reader are separate ``trinity run`` jobs (``mode: explore`` and
    ``mode: train``). An in-memory queue cannot reach the other job, so a ``queue`` is opened
    as its ``path`` mirror (``sqlite:///x.db`` → ``sql``, else ``file``), which both jobs see:
    Trinity's async example pair, both sides ``storage_type: queue`` with one sqlite path.

    ``replay``: ``rft_core.buffer.queue.replay_settings`` of the config, for a ``queue`` (a
    priority replay queue instead of the FIFO); the validator refuses it for other kinds."""
    kind = (storage_type or "queue").lower()
    if role not in ("writer", "reader"):
        raise ValueError(f"role must be 'writer' or 'reader', not {role!r}")
    if kind == "queue" and between_jobs:
        if not path:
            raise ConfigError(f"{_CONFIG_PATH}.path", QUEUE_BETWEEN_JOBS_NEEDS_PATH)
        kind = mirror_storage_type(path)
    if kind == "queue" and replay is not None:
        return BUFFERS.get(kind)(
            name=name, path=path, job_dir=Path(job_dir), role=role, replay=replay
        )
    return BUFFERS.get(kind)(name=name, path=path, job_dir=Path(job_dir), role=role)


__all__ = [
    "BUFFERS",
    "QUEUE_BETWEEN_JOBS_NEEDS_PATH",
    "BufferTimeout",
    "ExperienceBuffer",
    "build_buffer",
    "resolve_buffer_path",
]
