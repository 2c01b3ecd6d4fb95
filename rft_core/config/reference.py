"""The reference YAML: every config field with its default and help, generated from the schema.

    python -m rft_core.config.reference > docs/config_reference.yaml

Sections that are lists (tasksets, eval_tasksets, stages) show one item with every field;
optional sections (taskset, experience_buffer) show their fields with defaults. A test fails
when docs/config_reference.yaml differs from what this prints.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import yaml

from rft_core.config.fields import FieldInfo, inner_cap, iter_fields
from rft_core.config.schema import Config

HEADER = """\
# RFT Studio config reference: every field of a Trinity-RFT-compatible config, its default and
# what it does. Generated from rft_core/config/schema.py; do not edit by hand:
#     python -m rft_core.config.reference > docs/config_reference.yaml
# "derived" = left unset (null), the validator fills it from the rest of the config.
# [beginner] fields are the ones the simple web form shows; the rest are expert settings.
"""


def reference_yaml() -> str:
    lines = [HEADER.rstrip("\n")]
    _emit(Config, "", 0, lines, list_item=False, seen={})
    return "\n".join(lines) + "\n"


def _emit(
    cls: type,
    prefix: str,
    indent: int,
    lines: list[str],
    *,
    list_item: bool,
    seen: dict[type, str],
    cap: frozenset[str] | None = None,
) -> None:
    """Optional sections and list items are expanded the first time their type appears; later
    they show their default with a pointer to the first place (the reference stays readable)."""
    first = True
    for info in iter_fields(cls, prefix, recursive=False, cap=cap):
        inner = inner_cap(info, cap)
        pad = " " * indent
        if list_item and first:
            pad = " " * (indent - 2) + "- "
        first = False
        comment = _comment(info)
        kind = info.item_type or info.type
        if (info.optional or info.item_type) and kind in seen:
            shown = "[]" if info.item_type else "null"
            lines.append(f"{pad}{info.name}: {shown}{comment} (fields as in {seen[kind]})")
        elif dataclasses.is_dataclass(info.type):
            seen.setdefault(kind, info.path)
            lines.append(f"{pad}{info.name}:{comment}")
            _emit(info.type, info.path, indent + 2, lines, list_item=False, seen=seen, cap=inner)
        elif info.item_type is not None:
            seen.setdefault(kind, f"{info.path}[]")
            lines.append(f"{pad}{info.name}:{comment}")
            _emit(
                info.item_type,
                f"{info.path}[]",
                indent + 4,
                lines,
                list_item=True,
                seen=seen,
                cap=inner,
            )
        else:
            lines.append(f"{pad}{info.name}: {_scalar(info.default)}{comment}")


def _comment(info: FieldInfo) -> str:
    parts = [info.help] if info.help else []
    if info.choices:
        choices = " | ".join(info.choices)
        if info.aliases:
            choices += "; aliases " + ", ".join(f"{a}={b}" for a, b in info.aliases.items())
        parts.append(f"[{choices}]")
    if info.level == "beginner":
        parts.append("[beginner]")
    return f"  # {' '.join(parts)}" if parts else ""


def _scalar(value: Any) -> str:
    if value == {} or value == []:
        return "{}" if value == {} else "[]"
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


if __name__ == "__main__":
    sys.stdout.write(reference_yaml())
