"""Datasets the trainer reads directly (SFT warmup, DPO) in train mode.

``load_sft_dataset(cfg.buffer)`` (or the ``experience_buffer`` config itself) returns plain rows:

- ``schema="sft"``: ``{"messages": [{"role", "content"}, ...]}``, from a messages column
  (``format.messages_key``; a JSON string is parsed) or built from ``prompt_key`` /
  ``response_key`` columns (with ``format.system_prompt`` / ``system_prompt_key`` first);
- ``schema="dpo"``: ``{"prompt": str | "messages": list, "chosen": ..., "rejected": ...}``.

``format.prompt_type: auto`` picks messages when the messages column exists, else plaintext.
The trainer renders the rows with the chat template (``rft_core.messages``).
"""

from __future__ import annotations

import json
from typing import Any

from rft_core.config.schema import BufferConfig, ExperienceBufferConfig, FormatConfig
from rft_core.data.source import Rows, read_config_rows
from rft_core.data.taskset import config_path
from rft_core.errors import DataError

DEFAULT_PATH = "buffer.trainer_input.experience_buffer"


def load_sft_dataset(
    cfg: BufferConfig | ExperienceBufferConfig, *, schema: str = "sft", rows: Rows | None = None
) -> list[dict[str, Any]]:
    """Every row of the SFT (or DPO) dataset named by the experience buffer config; ``rows``:
    the file's rows as :func:`check_sft_dataset` read them (else it is read here)."""
    eb, rows, where = _open(cfg, schema, rows)
    if schema == "dpo":
        return _dpo_rows(rows, eb.format, where)
    return _sft_rows(rows, eb.format, where)


def check_sft_dataset(cfg: BufferConfig | ExperienceBufferConfig, *, schema: str = "sft") -> Rows:
    """What ``load_sft_dataset`` needs of the file and its columns, without converting the
    rows: ``trinity run`` calls it before any actor starts and hands the rows it returns to
    the trainer."""
    eb, rows, where = _open(cfg, schema)
    if schema == "dpo":
        _dpo_columns(rows, eb.format, where)
        _layout(rows, eb.format, where, [("prompt_key", eb.format.prompt_key)])
    else:
        _sft_layout(rows, eb.format, where)
    return rows


def _open(
    cfg: BufferConfig | ExperienceBufferConfig, schema: str, rows: Rows | None = None
) -> tuple[Any, Rows, str]:
    eb = cfg.trainer_input.experience_buffer if isinstance(cfg, BufferConfig) else cfg
    where = config_path(eb, DEFAULT_PATH)
    if eb is None:
        raise DataError(f"{DEFAULT_PATH}: not set; give the {schema.upper()} dataset there")
    if schema not in ("sft", "dpo"):
        raise ValueError(f"unknown dataset schema {schema!r}; expected sft or dpo")
    if eb.storage_type not in (None, "file"):
        raise DataError(
            f"{where}.storage_type: {schema.upper()} data is read from files; got {eb.storage_type!r}, use storage_type: file"
        )
    if rows is None:
        rows = read_config_rows(eb, where, f"{schema.upper()} dataset")
    return eb, rows, where


def _layout(
    rows: Rows, fmt: FormatConfig, where: str, plaintext_keys: list[tuple[str, str]]
) -> str:
    columns = rows.columns
    if fmt.prompt_type == "messages" or (fmt.prompt_type == "auto" and fmt.messages_key in columns):
        if fmt.messages_key not in columns:
            raise DataError(
                f"{where}.format.messages_key: column {fmt.messages_key!r} is not in {rows.describe()}; "
                f"columns present: {', '.join(columns)}. Set messages_key, or prompt_type: plaintext with prompt_key/response_key"
            )
        return "messages"
    for key, column in plaintext_keys:
        if column not in columns:
            raise DataError(
                f"{where}.format.{key}: column {column!r} is not in {rows.describe()} (and no {fmt.messages_key!r} "
                f"messages column either); columns present: {', '.join(columns)}. Set format.{key} or format.messages_key"
            )
    return "plaintext"


def _messages(value: Any, where: str, index: int) -> list[dict[str, Any]]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = None
    if not isinstance(value, list) or not all(isinstance(m, dict) and "role" in m for m in value):
        raise DataError(
            f"{where}.format.messages_key: row {index} is not a list of {{role, content}} messages: {str(value)[:80]!r}"
        )
    return [dict(m) for m in value]


def _system(row: dict[str, Any], fmt: FormatConfig) -> list[dict[str, str]]:
    text = row.get(fmt.system_prompt_key) if fmt.system_prompt_key else None
    text = text or fmt.system_prompt
    return [{"role": "system", "content": str(text)}] if text else []


def _cell(row: dict[str, Any], fmt: FormatConfig, key: str, where: str, i: int, rows: Rows) -> Any:
    """``row``'s value of the column ``format.<key>`` names; a row lacking it is an error that
    names the key, the row and the columns present (not a KeyError, not the text 'None')."""
    column = getattr(fmt, key)
    value = row.get(column)
    if value is None:
        raise DataError(
            f"{where}.format.{key}: row {i} of {rows.describe()} has no {column!r} value "
            f"(its columns: {', '.join(k for k, v in row.items() if v is not None)}); "
            "fix the row or remove it"
        )
    return value


def _sft_layout(rows: Rows, fmt: FormatConfig, where: str) -> str:
    return _layout(
        rows, fmt, where, [("prompt_key", fmt.prompt_key), ("response_key", fmt.response_key)]
    )


def _sft_rows(rows: Rows, fmt: FormatConfig, where: str) -> list[dict[str, Any]]:
    layout = _sft_layout(rows, fmt, where)
    out = []
    for i in range(len(rows)):
        row = rows.row(i)
        if layout == "messages":
            messages = _messages(_cell(row, fmt, "messages_key", where, i, rows), where, i)
        else:
            messages = _system(row, fmt) + [
                {"role": "user", "content": str(_cell(row, fmt, "prompt_key", where, i, rows))},
                {
                    "role": "assistant",
                    "content": str(_cell(row, fmt, "response_key", where, i, rows)),
                },
            ]
        out.append({"messages": messages})
    return out


def _dpo_columns(rows: Rows, fmt: FormatConfig, where: str) -> None:
    columns = rows.columns
    for key, column in (("chosen_key", fmt.chosen_key), ("rejected_key", fmt.rejected_key)):
        if column not in columns:
            raise DataError(
                f"{where}.format.{key}: column {column!r} is not in {rows.describe()}; columns present: {', '.join(columns)}"
            )


def _dpo_rows(rows: Rows, fmt: FormatConfig, where: str) -> list[dict[str, Any]]:
    _dpo_columns(rows, fmt, where)
    layout = _layout(rows, fmt, where, [("prompt_key", fmt.prompt_key)])
    out = []
    for i in range(len(rows)):
        row = rows.row(i)
        item: dict[str, Any] = {
            "chosen": _cell(row, fmt, "chosen_key", where, i, rows),
            "rejected": _cell(row, fmt, "rejected_key", where, i, rows),
        }
        if layout == "messages":
            item["messages"] = _messages(_cell(row, fmt, "messages_key", where, i, rows), where, i)
        elif _system(row, fmt):
            item["messages"] = _system(row, fmt) + [
                {"role": "user", "content": str(_cell(row, fmt, "prompt_key", where, i, rows))}
            ]
        else:
            item["prompt"] = str(_cell(row, fmt, "prompt_key", where, i, rows))
        out.append(item)
    return out
