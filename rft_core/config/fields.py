"""Walking the schema: every field with its YAML path, type, default and metadata. The JSON schema,
the reference YAML and the web forms read the schema through this one walker."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rft_core.config.schema import BEGINNER, Config


@dataclass
class FieldInfo:
    path: str  # dotted YAML path; list items as [] (buffer.explorer_input.eval_tasksets[].name)
    name: str
    type: Any  # the annotation with Optional stripped
    optional: bool
    default: Any  # plain value (dataclass defaults as dicts); None when derived
    help: str
    choices: list[str] | None
    aliases: dict[str, str]
    level: str
    section: str  # top-level section (algorithm, model, ...) or "general"
    unimplemented: bool = False  # accepted for Trinity-RFT compatibility, not acted on

    @property
    def is_section(self) -> bool:
        return dataclasses.is_dataclass(self.type) or self.item_type is not None

    @property
    def item_type(self) -> type | None:
        """The dataclass of list items (tasksets, eval_tasksets, stages), else None."""
        if typing.get_origin(self.type) is list:
            (item,) = typing.get_args(self.type)
            return item if dataclasses.is_dataclass(item) else None
        return None

    @property
    def derived(self) -> bool:
        return self.default is None and "derived" in self.help


def iter_fields(
    cls: type = Config, prefix: str = "", section: str = "", *, recursive: bool = True
) -> Iterator[FieldInfo]:
    """Every field of ``cls`` in declaration order, recursing into sections (depth first)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp, optional = strip_optional(hints[f.name])
        path = f"{prefix}.{f.name}" if prefix else f.name
        info = FieldInfo(
            path=path,
            name=f.name,
            type=tp,
            optional=optional,
            default=default_value(f),
            help=f.metadata.get("help", ""),
            choices=f.metadata.get("choices"),
            aliases=f.metadata.get("aliases", {}),
            level=f.metadata.get("level", BEGINNER),
            section=section
            or (f.name if dataclasses.is_dataclass(tp) or f.name == "stages" else "general"),
            unimplemented=f.metadata.get("unimplemented", False),
        )
        yield info
        if not recursive:
            continue
        if dataclasses.is_dataclass(tp):
            yield from iter_fields(tp, path, info.section)
        elif info.item_type is not None:
            yield from iter_fields(info.item_type, f"{path}[]", info.section)


def default_value(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
    return f.default


def strip_optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False
